"""The fuzzer: corpus, mutators, attacks, oracles, schedulers and the fuzz loop (docs/design.md, "Mutations", "Fuzz loop")."""
