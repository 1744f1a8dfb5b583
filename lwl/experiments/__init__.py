"""The paper's studies, runnable as ``lwl experiment NAME --preset quick|paper``."""
