"""The Beam job's stages: listing, pairing, shard planning, shard writing, commit."""
