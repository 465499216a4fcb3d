"""What every corral command-line program shares: one-line usage errors, options built from
the settings tables, and reading the TOML configuration file. Imports `corral.common` only."""
