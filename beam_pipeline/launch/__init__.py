"""From argv to a running job: flags, the run plan, checks, launch and monitoring."""
