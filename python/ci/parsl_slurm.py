"""Parsl's SlurmProvider on koalesce: a HighThroughputExecutor whose blocks are koalesce jobs
submitted with koalesce's sbatch (status through sacct, cancel through scancel) runs a small
workflow: a fan-out of python apps, a bash app, and a reduction over their results. Prints one
line: `parsl: N tasks, result R (ok)`."""
import os
import sys

import parsl
from parsl.app.app import bash_app, python_app
from parsl.config import Config
from parsl.executors import HighThroughputExecutor
from parsl.providers import SlurmProvider


@python_app
def square(x):
    import os
    return x * x, os.environ.get('SLURM_JOB_ID')


@python_app
def total(*results):
    return sum(r[0] for r in results)


@bash_app
def write(path, value):
    return 'echo %d > %s' % (value, path)


def main() -> int:
    run_dir = os.path.join(os.environ['KOALESCE_TOOLS_DIR'], 'parsl-runinfo')
    config = Config(
        executors=[HighThroughputExecutor(
            label='koalesce_slurm',
            address='127.0.0.1',
            max_workers_per_node=2,
            provider=SlurmProvider(
                nodes_per_block=1, init_blocks=1, min_blocks=0, max_blocks=2,
                walltime='00:10:00', exclusive=False,
                worker_init='export PYTHONPATH=%s' % os.pathsep.join(sys.path),
            ),
        )],
        run_dir=run_dir,
        strategy='simple',
    )
    dfk = parsl.load(config)
    try:
        squares = [square(i) for i in range(10)]
        result = total(*squares).result(timeout=300)
        jobs = sorted({f.result()[1] for f in squares})
        out = os.path.join(os.environ['KOALESCE_TOOLS_DIR'], 'parsl-result.txt')
        write(out, result).result(timeout=120)
        with open(out) as f:
            written = int(f.read())
        ok = result == sum(i * i for i in range(10)) and written == result and all(jobs)
        print('parsl: %d tasks on koalesce jobs %s, result %d (%s)'
              % (len(squares) + 2, ','.join(j or '?' for j in jobs), result, 'ok' if ok else 'WRONG'))
        return 0 if ok else 1
    finally:
        dfk.cleanup()
        parsl.clear()


if __name__ == '__main__':
    sys.exit(main())
