"""Pure, Beam-free record logic: bytes in, arrays or bytes out, precise exceptions.

Nothing in this package imports apache_beam, so the training-side reader can use it.
"""
