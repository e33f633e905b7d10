"""Local runtime helpers the job's stages use: file access and writer processes."""
