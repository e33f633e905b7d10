"""The other subcommands (sample-data, verify, inspect) and the run summary."""
