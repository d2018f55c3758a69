"""pytest plugin for running PSI/J's test suite against koalesce's Slurm-compatible commands:
PSI/J's batch executors poll the queue every 30 s by default (a politeness setting for real
clusters); here they poll every KOALESCE_PSIJ_POLL seconds (default 1) so the suite takes
minutes, not a quarter of an hour. Nothing else of PSI/J is changed."""
import os

from psij.executors.batch import batch_scheduler_executor as bse

_interval = int(os.environ.get('KOALESCE_PSIJ_POLL', '1'))
_orig_init = bse.BatchSchedulerExecutorConfig.__init__


def _init(self, *args, **kwargs):  # type: ignore
    # (launcher_log_file, work_directory, queue_polling_interval, initial_queue_polling_delay)
    if len(args) < 3:
        kwargs.setdefault('queue_polling_interval', _interval)
    if len(args) < 4:
        kwargs.setdefault('initial_queue_polling_delay', _interval)
    _orig_init(self, *args, **kwargs)


bse.BatchSchedulerExecutorConfig.__init__ = _init
