"""The oracle: pristine upstream and the fork run the same tiny models and cases, compared (`python -m oracle`)."""

# The case families of `oracle.families`, named here so that the driver need not import transformers
FAMILIES = ("packed_masks", "cache_layers", "inconsistent_masks", "kept_inputs", "memory", "hooks")
