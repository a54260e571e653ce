"""The openb packing benchmark (FGD, USENIX ATC'23 protocol): runner, published figures, report."""
