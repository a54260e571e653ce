"""placeholder while baselines are checked"""
