"""The bridge into Spark through RayDP: the session, topics read as DataFrames, value formats, micro-batches."""
