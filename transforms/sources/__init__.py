"""Mask sources behind one protocol (`base.MaskSource`) and one registry (`registry`)."""
