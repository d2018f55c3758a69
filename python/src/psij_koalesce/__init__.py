"""A PSI/J executor for koalesce, a grid resource manager (see executor.py)."""
from psij_koalesce.executor import KoalesceExecutorConfig, KoalesceJobExecutor

__all__ = ['KoalesceExecutorConfig', 'KoalesceJobExecutor']
