"""Data files shipped inside the wheel: the support catalog (catalog.json: systems, ROCm
releases, kernels, gfx tables) and the CLI's contract with the roles (cli_contract.json)."""
