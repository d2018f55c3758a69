#!/usr/bin/env python3
"""Per-job CPU breakdown from `perf script -F pid,tid,comm,ip,sym` output of a bench e2e run
recorded with `perf record -F 499 -g`: which process class and which kind of work."""
import collections, sys
path, hz, jobs = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
samples = []; cur = None
for line in open(path):
    if not line.strip(): continue
    if line[0] not in ' \t':
        parts = line.split(); cur = {'comm': parts[0], 'pid': parts[1].split('/')[0], 'stack': []}; samples.append(cur); continue
    f = line.strip().split(None, 1); cur['stack'].append(f[1] if len(f) > 1 else f[0])
byp = collections.Counter(p['pid'] for p in samples)
bench_pid = samples[0]['pid']
# the server: the process with tokio threads, the most samples of those not the bench
server_pid = next(pid for pid, _ in byp.most_common() if pid != bench_pid and any(p['comm'].startswith('tokio') for p in samples if p['pid'] == pid))
def klass(p):
    if p['pid'] == bench_pid: return 'bench (clients, watcher, teardown)'
    if p['pid'] == server_pid: return 'daemon'
    return 'supervisor+program'
def kind(st):
    s = ' '.join(st)
    if '__ext4_new_inode' in s: return 'ext4 inode allocation'
    if 'remove_dir_all' in s or 'unlinkat' in s: return 'file removal'
    if any(k in s for k in ('_dl_', 'dl_main', 'init_cpu_features', 'handle_amd', 'execve', 'load_elf')): return 'exec + dynamic loading'
    if 'page_fault' in s: return 'page faults'
    if any(k in s for k in ('clone', '_Fork', 'fork', 'spawn')): return 'fork/spawn'
    if 'do_exit' in s or 'exit_mmap' in s: return 'process exit'
    if 'cgroup' in s: return 'cgroups'
    if 'landlock' in s or 'sandbox' in s or 'mount' in s: return 'sandbox (Landlock, mounts)'
    if 'fsync' in s: return 'fsync'
    if 'sqlite' in s: return 'SQLite'
    return 'other'
tab = collections.defaultdict(collections.Counter)
for p in samples: tab[klass(p)][kind(p['stack'])] += 1
ms = lambda n: n / hz * 1000 / jobs
print(f"total {len(samples)} samples = {ms(len(samples)):.2f} ms CPU per job")
for k, c in sorted(tab.items(), key=lambda kv: -sum(kv[1].values())):
    print(f"{k:38s} {ms(sum(c.values())):6.2f} ms/job")
    for kk, n in c.most_common():
        print(f"    {kk:34s} {ms(n):6.2f}")
