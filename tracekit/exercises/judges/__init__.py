"""The trusted side of the exercises: truth computed now from PyTorch and tracekit, and the
judges that score a probe's raw observations against it (`JUDGES[question name]` per module).

Nothing on the probe side imports this package; the grading sandbox hides it.
"""
