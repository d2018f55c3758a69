#!/usr/bin/env python3
"""A plain Python EASY/FCFS single-cluster simulator with the semantics of `koalesce sim --trace`.

It is the side-by-side peer of the Rust implementation: `bench/compare_easy.sh` runs both on the
same trace, compares every job's start and end, and reports wall time and peak memory of each.

Semantics (the issue's): processors = field 8 (field 5 when -1); runtime = field 4 and a job runs
exactly its runtime; estimate = field 9, or the runtime when field 9 <= 0, raised to the runtime
when smaller; jobs with runtime <= 0, processors <= 0 or more than N are dropped; the queue is in
submit order, ties in trace order; at one instant all ends, then all arrivals, then one pass.
EASY: FCFS pass; the blocked head gets a reservation at the shadow time S (earliest estimated end
at which enough processors are free); extra = free at S minus the head's; a later job that fits
starts if now + estimate <= S or it uses no more than extra (which it then consumes).
"""
import gzip
import heapq
import sys


def read_jobs(path, n):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    jobs = []
    with opener(path, "rt") as f:
        for line in f:
            if not line.strip() or line.lstrip().startswith(";"):
                continue
            v = line.split()
            submit = int(float(v[1]))
            if submit < 0:
                continue
            run = int(float(v[3]))
            procs = int(float(v[7]))
            if procs == -1:
                procs = int(float(v[4]))
            est = int(float(v[8]))
            if est <= 0:
                est = run
            est = max(est, run)
            if run <= 0 or procs <= 0 or procs > n:
                continue
            jobs.append((submit, len(jobs), int(v[0]), procs, run, est))
    jobs.sort(key=lambda j: (j[0], j[1]))
    return jobs


def simulate(jobs, n, easy):
    free = n
    running = []  # heap of (end, seq, procs, est_end)
    queue = []
    out = {}
    i = 0
    now = 0
    seq = 0
    while i < len(jobs) or running or queue:
        t_next = []
        if running:
            t_next.append(running[0][0])
        if i < len(jobs):
            t_next.append(jobs[i][0])
        now = min(t_next)
        while running and running[0][0] == now:
            _, _, p, _ = heapq.heappop(running)
            free += p
        while i < len(jobs) and jobs[i][0] == now:
            queue.append(jobs[i])
            i += 1
        # FCFS pass
        while queue and queue[0][3] <= free:
            j = queue.pop(0)
            free -= j[3]
            seq += 1
            heapq.heappush(running, (now + j[4], seq, j[3], now + j[5]))
            out[j[2]] = (j[0], now, now + j[4], j[3])
        if easy and queue:
            head = queue[0]
            avail = free
            shadow = None
            for est_end, p in sorted((r[3], r[2]) for r in running):
                avail += p
                if avail >= head[3]:
                    shadow = est_end
                    break
            if shadow is None:
                continue
            # every running job ending (by estimate) at the shadow time counts as free there
            extra = free + sum(r[2] for r in running if r[3] <= shadow) - head[3]
            k = 1
            while k < len(queue) and free > 0:
                j = queue[k]
                if j[3] <= free and (now + j[5] <= shadow or j[3] <= extra):
                    if not (now + j[5] <= shadow):
                        extra -= j[3]
                    free -= j[3]
                    seq += 1
                    heapq.heappush(running, (now + j[4], seq, j[3], now + j[5]))
                    out[j[2]] = (j[0], now, now + j[4], j[3])
                    queue.pop(k)
                else:
                    k += 1
    return out


def main():
    path, n, policy, dest = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    out = simulate(read_jobs(path, n), n, policy == "easy")
    with open(dest, "w") as f:
        f.write("job_id,submit,start,end,procs\n")
        for job_id in sorted(out):
            s, st, e, p = out[job_id]
            f.write(f"{job_id},{s},{st},{e},{p}\n")


if __name__ == "__main__":
    main()
