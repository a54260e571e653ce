"""Teams: quotas with cohort borrowing and reclaim, time-aware fair share, dollar budgets.

The pure model; the drivers read usage and spend from their world and ask it.
"""
