"""The capacity loop: pending pods → launches, launch records, idle nodes → terminations, cost."""
