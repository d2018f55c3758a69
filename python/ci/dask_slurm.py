"""dask-jobqueue's SLURMCluster on koalesce: with koalesce's sbatch/squeue/scancel first on
PATH, scale to WORKERS single-core workers (each one koalesce job), compute a real result,
check it, and scale back down (scancel). Prints one line: `dask: N workers, result R (ok)`."""
import os
import sys
import time

from dask.distributed import Client
from dask_jobqueue import SLURMCluster


def main() -> int:
    workers = int(os.environ.get('KOALESCE_DASK_WORKERS', '3'))
    logdir = os.path.join(os.environ['KOALESCE_TOOLS_DIR'], 'dask-logs')
    os.makedirs(logdir, exist_ok=True)
    cluster = SLURMCluster(
        cores=1, processes=1, memory='1GB', walltime='00:10:00',
        job_name='dask-worker', log_directory=logdir,
        interface='lo', scheduler_options={'interface': 'lo'},
        worker_extra_args=['--local-directory', '$TMPDIR'],
        python=sys.executable)
    print(cluster.job_script(), file=sys.stderr)
    try:
        cluster.scale(jobs=workers)
        client = Client(cluster)
        client.wait_for_workers(workers, timeout=180)
        n = len(client.scheduler_info()['workers'])
        # A real computation spread over the workers: the sum of squares of 0..N-1 in chunks.
        size, chunks = 3_000_000, 4 * workers
        step = size // chunks
        parts = client.map(lambda lo: sum(i * i for i in range(lo, min(lo + step, size))),
                           range(0, size, step))
        result = client.submit(sum, parts).result()
        expected = (size - 1) * size * (2 * size - 1) // 6
        hosts = client.run(lambda: os.environ.get('SLURM_JOB_ID'))
        ok = result == expected and n == workers and all(hosts.values())
        print('dask: %d workers (koalesce jobs %s), result %d (%s)'
              % (n, ','.join(sorted(hosts.values())), result, 'ok' if ok else 'WRONG'))
        cluster.scale(0)
        t0 = time.time()
        while client.scheduler_info()['workers'] and time.time() - t0 < 60:
            time.sleep(0.5)
        client.close()
        return 0 if ok else 1
    finally:
        cluster.close()


if __name__ == '__main__':
    sys.exit(main())
