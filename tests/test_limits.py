"""tools.plan.limits: the limits file, read strictly; the repository's own file; every bad input
named with its file, key, rule and fix."""

from __future__ import annotations

import copy

import pytest
import yaml

from tools.core.errors import PlanError
from tools.plan.limits import LIMITS_PATH, load_limits, parse_limits

GOOD = yaml.safe_load(LIMITS_PATH.read_text())


def parse(data):
    return parse_limits(data, LIMITS_PATH.with_name("test-limits.yaml"))


def test_the_repositorys_file_holds_githubs_documented_figures():
    lim = load_limits()
    assert (lim.jobs_per_matrix, lim.job_output_bytes, lim.assets_per_release,
            lim.rest_requests_per_hour, lim.content_requests_per_hour,
            lim.content_requests_per_minute, lim.cache_bytes, lim.concurrent_jobs) == (
        256, 1_000_000, 1000, 1000, 500, 80, 10_000_000_000, 20)
    assert lim.asset_bytes == 2 * 2**30
    # the wheels go on the larger disk, less the reserve
    assert lim.wheel_disk_bytes == int((65 - 4) * 2**30)
    assert lim.paced(1000) == 800
    assert lim.order[0] == "torch" and lim.packages[0] == "flash_attn"


@pytest.mark.parametrize("edit, where, fix", [
    # an unknown limit: named, with the known ones
    (lambda d: d["limits"].update(jobs_per_hour={"value": 1, "source": "nowhere at all"}),
     "limits.jobs_per_hour: unknown key", "remove it or use one of"),
    # a figure without its source
    (lambda d: d["limits"]["assets_per_release"].pop("source"),
     "limits.assets_per_release.source: required key is missing", "add `source:`"),
    # a source that says nothing
    (lambda d: d["limits"]["assets_per_release"].update(source="docs"),
     "limits.assets_per_release.source: says nowhere", "name the page"),
    # a figure of the wrong type
    (lambda d: d["limits"]["cache_bytes"].update(value="10 GB"),
     "limits.cache_bytes.value: must be an integer", None),
    # a figure that is no limit
    (lambda d: d["limits"]["concurrent_jobs"].update(value=0),
     "limits.concurrent_jobs.value: 0 is not a limit", "a figure above 0"),
    # a missing limit
    (lambda d: d["limits"].pop("job_hours"), "limits.job_hours: required key is missing", None),
    # a policy rule without its reason
    (lambda d: d["policy"]["tries"].pop("reason"), "policy.tries.reason: required key", None),
    # a sort key the schedule doesn't know
    (lambda d: d["policy"]["order"].update(value=["torch", "downloads"]),
     "policy.order.value", "list each of torch, package, cuda, python, platform"),
    # a share that is no share
    (lambda d: d["policy"]["rate_share"].update(value=1.5), "policy.rate_share.value", None),
    # a reserve that leaves no disk
    (lambda d: d["policy"]["disk_reserve_gib"].update(value=100),
     "policy.disk_reserve_gib.value", "keep back less"),
    # a platform no cell has
    (lambda d: d["policy"]["max_parallel"]["value"].update(linux_riscv64=2),
     "policy.max_parallel.value.linux_riscv64: is not a wheel platform", None),
    # another schema
    (lambda d: d.update(schema=2), "schema: must be 1", None),
])
def test_bad_limits_files_name_the_file_key_rule_and_fix(edit, where, fix):
    data = copy.deepcopy(GOOD)
    edit(data)
    with pytest.raises(PlanError) as err:
        parse(data)
    text = str(err.value)
    assert "test-limits.yaml" in text and where in text
    if fix:
        assert fix in text


def test_every_problem_in_one_error():
    data = copy.deepcopy(GOOD)
    data["limits"]["cache_bytes"]["value"] = -1
    data["policy"]["tries"]["value"] = 0
    with pytest.raises(PlanError, match="2 problems"):
        parse(data)
