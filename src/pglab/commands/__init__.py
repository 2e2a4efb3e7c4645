"""What each `pglab` command does; cli.py parses the arguments and calls these.

One module per family of commands. cli.py imports a module only when its command runs,
so a command pays only for the imports it uses (`pglab ls` never loads the PostgreSQL
driver, pydantic or polars).
"""
