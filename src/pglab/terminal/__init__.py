"""What a person sees in the terminal: the live run display, a run's summary, findings,
what tune found. Used by the commands only; the HTML report is report/."""
