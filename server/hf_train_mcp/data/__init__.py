"""validate_dataset: read a sample (Hub viewer API or local files), check it against the method's format."""
