"""The fuzzer: corpus, mutators, attacks, oracles, schedulers and the fuzz loop (DESIGN §6-7)."""
