"""Course machinery: running notebooks, generating exercises, grading (``make exercises``, ``make grade``)."""
