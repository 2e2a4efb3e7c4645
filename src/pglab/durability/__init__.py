"""Cuts (crashes and power losses) and what they cost in data: the ledger of acknowledged
commits (`ledger`), the integrity verdicts after each cut and at the end (`verdicts`),
analysis.json's durability section (`section`) and its lines for the terminal (`lines`).
Which fault actions are cuts is a trait in scenario/fault_kinds.py."""
