"""Unit tests of the koalesce PSI/J executor's translation (no server needed)."""
import tomllib
from datetime import timedelta

import pytest
from psij import InvalidJobException, Job, JobAttributes, JobSpec, ResourceSpecV1

from psij_koalesce.executor import KoalesceExecutorConfig, KoalesceJobExecutor, to_toml


def _executor(tmp_path):
    return KoalesceJobExecutor(url='http://127.0.0.1:1',
                               config=KoalesceExecutorConfig(work_directory=tmp_path))


@pytest.mark.parametrize('text', ['plain', 'quote " and \\ backslash', 'new\nline\ttab',
                                  'bell\x07 del\x7f nul-free', 'ünïcødé ☃ 😀', '${KOALESCE_X}'])
def test_toml_round_trips_any_text(text):
    desc = {'name': text, 'executable': '/bin/sh', 'arguments': [text, 'x'],
            'environment': {'K': text, text: 'v'}, 'components': [{'processors': 2}]}
    back = tomllib.loads(to_toml(desc))
    assert back == desc


def test_spec_maps_to_a_description(tmp_path):
    ex = _executor(tmp_path)
    spec = JobSpec('/bin/echo', ['a b'], directory=tmp_path, environment={'A': '1'},
                   inherit_environment=False, stdout_path=tmp_path / 'o',
                   resources=ResourceSpecV1(process_count=3, cpu_cores_per_process=2,
                                            memory=6 * 1024 ** 3),
                   attributes=JobAttributes(duration=timedelta(minutes=5), queue_name='vu',
                                            custom_attributes={'koalesce.priority': 'high'}))
    d = ex.describe(Job(spec))
    assert d['components'] == [{'processors': 6, 'site': 'vu'}]
    assert d['walltime'] == '300s'
    assert d['memory'] == '%dK' % (1024 ** 2), '6 GiB over 6 processors'
    assert d['priority'] == 'high'
    assert d['environment'] == {'A': '1'}
    assert d['arguments'][3] == str(tmp_path), 'the wrapper changes into the directory'
    assert d['arguments'][-2:] == ['/bin/echo', 'a b']
    tomllib.loads(to_toml(d))


def test_coallocation_policy_and_refusals(tmp_path, monkeypatch):
    monkeypatch.setenv('KOALESCE_TOKEN', 'secret')
    ex = _executor(tmp_path)
    spec = JobSpec('/bin/true', resources=ResourceSpecV1(node_count=2, processes_per_node=2),
                   attributes=JobAttributes(queue_name='cm',
                                            custom_attributes={'koalesce.coallocate': True}))
    d = ex.describe(Job(spec))
    assert d['components'] == [{'processors': 2}, {'processors': 2}]
    assert d['runner'] == 'coupled' and d['policy'] == 'cm'
    assert 'KOALESCE_TOKEN' not in d['environment'], 'the token never goes to a job'
    with pytest.raises(InvalidJobException):
        ex.describe(Job(JobSpec('/bin/true', resources=ResourceSpecV1(gpu_cores_per_process=1))))
    with pytest.raises(InvalidJobException):
        ex.describe(Job(JobSpec('/bin/true', attributes=JobAttributes(
            custom_attributes={'koalesce.bogus': 1}))))
