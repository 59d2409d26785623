"""The finish steps both backends share after the compile: repair, ABI and arch inspection, the recipe's ``abi`` claim, metadata and the import smoke test."""
