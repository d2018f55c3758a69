"""PSI/J plugin descriptor: the `koalesce` executor."""
from packaging.version import Version
from psij.descriptor import Descriptor

__PSI_J_EXECUTORS__ = [
    Descriptor(name='koalesce', nice_name='koalesce', version=Version('0.1.0'),
               cls='psij_koalesce.executor.KoalesceJobExecutor')
]
