"""The model-matrix oracle: pristine upstream and the fork generate with the same tiny models, compared exactly."""
