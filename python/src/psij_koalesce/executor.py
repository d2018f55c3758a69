"""The ``koalesce`` PSI/J executor: PSI/J jobs become koalesce jobs through koalesce's REST API.

A :class:`psij.JobSpec` becomes one koalesce job description (TOML, POSTed to
``/api/v1/jobs``):

* executable, arguments, stdin/stdout/stderr paths and pre/post-launch scripts go through the
  spec's PSI/J launcher (``single`` by default, ``multiple``), exactly as PSI/J's batch executors
  run them; a small ``/bin/sh`` wrapper first changes into ``spec.directory`` (default: the
  submitting process's working directory) and sends the launcher's own output to
  ``WORK_DIR/<koalesce job id>.out`` (read back for failure messages, also after ``attach``);
* environment: ``spec.environment``, plus the submitting environment when
  ``spec.inherit_environment`` (never ``KOALESCE_TOKEN``; ``TMPDIR`` stays the job's own);
* resources (:class:`psij.ResourceSpecV1`): processes x cores per process processors in one
  component; with the custom attribute ``koalesce.coallocate = True`` and ``node_count > 1``, one
  component per node, co-allocated across sites and started together; ``memory`` becomes
  koalesce's per-processor ``memory``; GPUs are refused (:class:`psij.InvalidJobException`);
* ``attributes.duration`` becomes ``walltime``; ``attributes.queue_name`` a site (or a placement
  policy: wf, cf, cm, fcm, ttd, tts); custom attributes ``koalesce.priority``,
  ``koalesce.policy``, ``koalesce.requirements``, ``koalesce.rank``, ``koalesce.retries`` pass
  through.

States: queued / placed / claimed -> QUEUED, running -> ACTIVE, succeeded -> COMPLETED, failed ->
FAILED (exit code of the component, koalesce's failure text or the launcher's output as message),
cancelled -> CANCELED. One thread per executor polls the server.

The server is ``url`` (``JobExecutor.get_instance('koalesce', url=...)``), else the config's,
else ``KOALESCE_URL``, else ``~/.config/koalesce/client.toml``; the token likewise
(``KOALESCE_TOKEN``, ``token`` / ``token_file`` in that file).
"""

import json
import logging
import os
import threading
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from packaging.version import Version
from psij import (InvalidJobException, Job, JobExecutor, JobExecutorConfig, JobState, JobStatus,
                  ResourceSpecV1, SubmitException)

logger = logging.getLogger(__name__)

DEFAULT_URL = 'http://127.0.0.1:7878'
_POLICIES = {'wf', 'cf', 'cm', 'fcm', 'ttd', 'tts'}

# Runs in the job: write the node file (this host once per process of the component, as
# PSI/J's local executor does), change into the job's directory, send the launcher's output to
# WORK/<koalesce id>.out, run the launcher. ($KOALESCE_JOB_ID is set by koalesce; written
# without braces, so the server does not expand it.)
_WRAPPER = ('PSIJ_NODEFILE="$2/$KOALESCE_JOB_ID-$KOALESCE_RANK.nodefile"\n'
            'h=$(uname -n); i=0; : >"$PSIJ_NODEFILE"\n'
            'while [ "$i" -lt "$3" ]; do echo "$h" >>"$PSIJ_NODEFILE"; i=$((i+1)); done\n'
            'export PSIJ_NODEFILE\n'
            'cd "$1" || { echo "psij-koalesce: cannot change into $1" >&2; exit 126; }\n'
            'o="$2/$KOALESCE_JOB_ID.out"\n'
            'shift 3\n'
            'exec "$@" >"$o" 2>&1\n')

_STATES = {
    'queued': JobState.QUEUED,
    'placed': JobState.QUEUED,
    'claimed': JobState.QUEUED,
    'running': JobState.ACTIVE,
    'succeeded': JobState.COMPLETED,
    'failed': JobState.FAILED,
    'timeout': JobState.FAILED,
    'out_of_memory': JobState.FAILED,
    'cancelled': JobState.CANCELED,
}


class KoalesceExecutorConfig(JobExecutorConfig):
    """Configuration of the koalesce executor.

    Parameters
    ----------
    url
        The koalesce server (default: see the module documentation).
    token
        API token (default: ``KOALESCE_TOKEN`` or the client config file).
    poll_interval
        Seconds between status polls.
    """

    def __init__(self, launcher_log_file: Optional[Path] = None,
                 work_directory: Optional[Path] = None, url: Optional[str] = None,
                 token: Optional[str] = None, poll_interval: float = 0.5) -> None:
        super().__init__(launcher_log_file=launcher_log_file, work_directory=work_directory)
        self.url = url
        self.token = token
        self.poll_interval = poll_interval


def _client_config() -> Dict[str, Any]:
    base = os.environ.get('XDG_CONFIG_HOME') or os.path.join(os.path.expanduser('~'), '.config')
    path = os.path.join(base, 'koalesce', 'client.toml')
    try:
        import tomllib  # Python 3.11+
    except ImportError:  # pragma: no cover - older Pythons read no config file
        return {}
    try:
        with open(path, 'rb') as f:
            return tomllib.load(f)
    except FileNotFoundError:
        return {}


def _connection(url: Optional[str], config: KoalesceExecutorConfig) -> Tuple[str, Optional[str]]:
    file_cfg = _client_config()
    u = url or config.url or os.environ.get('KOALESCE_URL') or file_cfg.get('url') or DEFAULT_URL
    if '://' not in u:
        u = 'http://' + u
    token = config.token or os.environ.get('KOALESCE_TOKEN') or file_cfg.get('token')
    if not token and file_cfg.get('token_file'):
        with open(file_cfg['token_file']) as f:
            token = f.readline().strip() or None
    return u.rstrip('/'), token


def toml_string(s: str) -> str:
    """A TOML basic string for any text (control characters and DEL escaped)."""
    out = json.dumps(s, ensure_ascii=False)
    return out.replace('\x7f', '\\u007f')


def toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return 'true' if v else 'false'
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return toml_string(v)
    if isinstance(v, list):
        return '[' + ', '.join(toml_value(x) for x in v) + ']'
    if isinstance(v, dict):
        return '{ ' + ', '.join('%s = %s' % (toml_string(k), toml_value(x))
                                for k, x in v.items()) + ' }'
    raise TypeError('cannot write %r as TOML' % (v,))


def to_toml(desc: Dict[str, Any]) -> str:
    """The job description as TOML: scalars first, then [[components]] tables."""
    lines = []
    for k, v in desc.items():
        if k == 'components':
            continue
        lines.append('%s = %s' % (k, toml_value(v)))
    for c in desc.get('components', []):
        lines.append('')
        lines.append('[[components]]')
        for k, v in c.items():
            lines.append('%s = %s' % (k, toml_value(v)))
    return '\n'.join(lines) + '\n'


class _ApiError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__('koalesce server answered HTTP %s: %s' % (status, message))
        self.status = status
        self.message = message


class _Api:
    """A minimal client for koalesce's REST API (docs/server-contract.md)."""

    def __init__(self, url: str, token: Optional[str]) -> None:
        self.url = url
        self.token = token

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                content_type: Optional[str] = None) -> Any:
        req = urllib.request.Request(self.url + path, data=body, method=method)
        if self.token:
            req.add_header('Authorization', 'Bearer ' + self.token)
        if content_type:
            req.add_header('Content-Type', content_type)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                text = resp.read().decode('utf-8')
        except urllib.error.HTTPError as e:
            text = e.read().decode('utf-8', 'replace')
            try:
                msg = json.loads(text).get('error', text)
            except (ValueError, AttributeError):
                msg = text.strip()
            raise _ApiError(e.code, msg) from None
        return json.loads(text) if text.strip() else None


class KoalesceJobExecutor(JobExecutor):
    """A :class:`psij.JobExecutor` for koalesce grids (see the module documentation)."""

    _NAME_ = 'koalesce'
    _VERSION_ = Version('0.1.0')

    def __init__(self, url: Optional[str] = None,
                 config: Optional[KoalesceExecutorConfig] = None) -> None:
        if config is None:
            config = KoalesceExecutorConfig()
        elif not isinstance(config, KoalesceExecutorConfig):
            config = KoalesceExecutorConfig(launcher_log_file=config.launcher_log_file,
                                            work_directory=config.work_directory)
        super().__init__(url=url, config=config)
        self._kconfig = config
        base, token = _connection(url, config)
        self._api = _Api(base, token)
        self.work_directory = config.work_directory / 'koalesce'
        self.work_directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._jobs: Dict[str, List[Job]] = {}
        self._wake = threading.Event()
        self._poller = threading.Thread(target=self._poll_loop, name='koalesce-psij-poll',
                                        daemon=True)
        self._poller.start()

    # ----- submission -------------------------------------------------------------------

    def describe(self, job: Job) -> Dict[str, Any]:
        """The koalesce job description (as a dict) for a PSI/J job."""
        spec = job.spec
        assert spec is not None
        launcher = self._get_launcher(spec.launcher or 'single')
        log_file = str(self._kconfig.launcher_log_file) if self._kconfig.launcher_log_file else None
        command = launcher.get_launch_command(job, log_file=log_file)
        directory = str(spec.directory) if spec.directory else os.getcwd()
        env: Dict[str, str] = {}
        if spec.inherit_environment:
            for k, v in os.environ.items():
                if k not in ('KOALESCE_TOKEN', 'TMPDIR', 'PWD', 'OLDPWD'):
                    env[k] = v
        for k, v in (spec.environment or {}).items():
            env[str(k)] = str(v)
        attrs = spec.attributes
        custom = {}
        for k, v in (attrs.custom_attributes or {}).items():
            if k.startswith('koalesce.'):
                custom[k[len('koalesce.'):]] = v
        processes, cores, nodes, memory = 1, 1, 1, None
        res = spec.resources
        if res is not None:
            if not isinstance(res, ResourceSpecV1):
                raise InvalidJobException('koalesce takes ResourceSpecV1 resources only')
            if res.gpu_cores_per_process:
                raise InvalidJobException('koalesce sites offer no GPUs (gpu_cores_per_process)')
            processes = res.computed_process_count or 1
            cores = res.cpu_cores_per_process or 1
            nodes = res.computed_node_count or 1
            memory = res.memory
        total = processes * cores
        if custom.pop('coallocate', False) and nodes > 1:
            if processes % nodes != 0:
                raise InvalidJobException('koalesce.coallocate needs the processes (%d) to divide '
                                          'evenly over the nodes (%d)' % (processes, nodes))
            components = [{'processors': processes // nodes * cores} for _ in range(nodes)]
        else:
            components = [{'processors': total}]
        desc: Dict[str, Any] = {
            'name': spec.name or 'psij',
            'executable': '/bin/sh',
            'arguments': ['-c', _WRAPPER, 'psij-koalesce', directory,
                          str(self.work_directory.absolute()),
                          str(processes // len(components))] + [str(a) for a in command],
            'environment': env,
            'retries': int(custom.pop('retries', 0)),
        }
        if len(components) > 1:
            desc['runner'] = 'coupled'
        if attrs.duration is not None and attrs.duration > timedelta(0):
            desc['walltime'] = '%ds' % max(1, int(attrs.duration.total_seconds()))
        if memory:
            per = -(-int(memory) // components[0]['processors'] // 1024)
            desc['memory'] = '%dK' % max(1, per)
        if attrs.queue_name:
            if attrs.queue_name.lower() in _POLICIES:
                desc['policy'] = attrs.queue_name.lower()
            elif len(components) == 1:
                components[0]['site'] = attrs.queue_name
            else:
                desc['requirements'] = 'HOSTNAME = %s' % toml_string(attrs.queue_name)
        for k in ('priority', 'policy', 'requirements', 'rank'):
            if k in custom:
                desc[k] = str(custom.pop(k))
        if custom:
            raise InvalidJobException('unknown koalesce custom attributes: %s'
                                      % ', '.join('koalesce.' + k for k in sorted(custom)))
        desc['components'] = components
        return desc

    def submit(self, job: Job) -> None:
        """See :func:`psij.JobExecutor.submit`."""
        self._check_job(job)
        try:
            desc = self.describe(job)
        except InvalidJobException:
            job.executor = None
            raise
        text = to_toml(desc)
        try:
            answer = self._api.request('POST', '/api/v1/jobs', text.encode('utf-8'),
                                       'application/toml')
        except _ApiError as e:
            job.executor = None
            if e.status in (400, 422):
                raise InvalidJobException(e.message) from None
            raise SubmitException(str(e)) from None
        except OSError as e:
            job.executor = None
            raise SubmitException('cannot reach the koalesce server at %s: %s'
                                  % (self._api.url, e)) from None
        native_id = str(answer['id'])
        job._native_id = native_id
        self._set_job_status(job, JobStatus(JobState.QUEUED, metadata={'native_id': native_id}))
        self._register(job)

    def cancel(self, job: Job) -> None:
        """See :func:`psij.JobExecutor.cancel`."""
        if job.native_id is None:
            raise SubmitException('Job does not have a native ID.')
        if job.status.state.final:
            return
        try:
            self._api.request('POST', '/api/v1/jobs/%s/cancel' % job.native_id)
        except _ApiError as e:
            if e.status == 409:  # already finished
                return
            raise SubmitException(str(e)) from None
        except OSError as e:
            raise SubmitException('cannot reach the koalesce server: %s' % e) from None
        self._wake.set()

    def list(self) -> List[str]:
        """See :func:`psij.JobExecutor.list`."""
        return [str(j['id']) for j in self._api.request('GET', '/api/v1/jobs')]

    def attach(self, job: Job, native_id: str) -> None:
        """See :func:`psij.JobExecutor.attach`."""
        if job.status.state != JobState.NEW:
            raise InvalidJobException('Job must be in the NEW state')
        job.executor = self
        job._native_id = str(native_id)
        self._register(job)

    # ----- status ------------------------------------------------------------------------

    def _register(self, job: Job) -> None:
        assert job.native_id is not None
        with self._lock:
            self._jobs.setdefault(job.native_id, []).append(job)
        self._wake.set()

    def _poll_loop(self) -> None:
        while True:
            self._wake.wait(self._kconfig.poll_interval)
            self._wake.clear()
            with self._lock:
                watched = {k: list(v) for k, v in self._jobs.items()}
            if not watched:
                continue
            try:
                self._poll(watched)
            except Exception as ex:  # keep polling: the server may be restarting
                logger.warning('koalesce status poll failed: %s', ex)

    def _poll(self, watched: Dict[str, List[Job]]) -> None:
        listed = {str(j['id']): j for j in self._api.request('GET', '/api/v1/jobs')}
        for native_id, jobs in watched.items():
            summary = listed.get(native_id)
            if summary is None:
                try:
                    summary = self._api.request('GET', '/api/v1/jobs/%s' % native_id)
                except _ApiError as e:
                    if e.status == 404:
                        self._finish(native_id, jobs, JobStatus(
                            JobState.FAILED, message='koalesce job %s not found' % native_id))
                    continue
            state = _STATES.get(summary.get('state', ''), JobState.QUEUED)
            if not state.final:
                for job in jobs:
                    self._set_job_status(job, JobStatus(state))
                continue
            self._finish(native_id, jobs, self._final_status(native_id, state))

    def _final_status(self, native_id: str, state: JobState) -> JobStatus:
        if state == JobState.CANCELED:
            return JobStatus(state)
        detail = self._api.request('GET', '/api/v1/jobs/%s' % native_id)
        codes = [c.get('exit_code') for c in detail.get('components', [])
                 if c.get('exit_code') is not None]
        exit_code = next((c for c in codes if c != 0), codes[0] if codes else None)
        message = None
        if state == JobState.FAILED:
            message = detail.get('failure')
            out = self.work_directory / ('%s.out' % native_id)
            try:
                text = out.read_text()
                if '_PSI_J_LAUNCHER_DONE' not in text and text.strip():
                    message = text
            except OSError:
                pass
        return JobStatus(state, exit_code=exit_code, message=message)

    def _finish(self, native_id: str, jobs: List[Job], status: JobStatus) -> None:
        with self._lock:
            self._jobs.pop(native_id, None)
        for job in jobs:
            self._set_job_status(job, status)
