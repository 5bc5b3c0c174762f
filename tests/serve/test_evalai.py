"""The EvalAI kit (evalai/): the evaluation script called the way EvalAI's submission worker calls it
(evaluation_script.zip extracted into challenge_data/challenge_<id>/ and imported as that package,
evaluate(annotation, submission, phase codename, submission_metadata=...)), its leaderboard rows
checked as the worker and the leaderboard use them and against sgeval.evaluate on the same files,
bad submissions (the participant's message names the file and image, never the hidden annotations'
paths), missing images, unsafe annotation ZIPs, the starter challenge config against the script's
columns, and the builders."""

import importlib
import importlib.util
import json
import shutil
import sys
import tempfile
import traceback
import zipfile

import pytest
import yaml
from conftest import ROOT, rewrite_json, sgeval, write_zip

from evalai import build
from tools import make_demo

PHASE_IDS = {"dev": 1, "test": 2}


def import_as_worker(script_zip, compute, challenge_id):
    """What the worker does with a challenge's evaluation script: empty __init__.py files in
    compute/, compute/challenge_data/ and challenge_data/challenge_<id>/, the ZIP extracted into
    the latter, which is then imported as the package challenge_data.challenge_<id>. The worker
    finds challenge_data on sys.path (it appends compute/ to it); here challenge_data is loaded
    from its folder and put in sys.modules (the challenge fixture removes it), and the import
    system finds challenge_<id> and its modules in their folders, as in the worker."""
    data_dir = compute / "challenge_data"
    challenge_dir = data_dir / f"challenge_{challenge_id}"
    challenge_dir.mkdir(parents=True)
    for folder in (compute, data_dir, challenge_dir):
        (folder / "__init__.py").touch()
    with zipfile.ZipFile(script_zip) as archive:
        assert all(not name.startswith("/") and ".." not in name for name in archive.namelist())
        archive.extractall(challenge_dir)
    spec = importlib.util.spec_from_file_location("challenge_data", data_dir / "__init__.py",
                                                  submodule_search_locations=[str(data_dir)])
    sys.modules["challenge_data"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sys.modules["challenge_data"])
    importlib.invalidate_caches()
    return importlib.import_module(f"challenge_data.challenge_{challenge_id}"), challenge_dir


class Challenge:
    """The demo data, the built kit and the imported evaluation script, as a worker holds them."""

    def __init__(self, root):
        self.data = root / "data"
        self.gt, self.pred = make_demo.make_demo(self.data)
        self.annotations = root / "annotations"
        assert build.main(["annotations", "--gt", self.gt, "--gt-seg", self.data / "panoptic",
                           "--out", self.annotations / "psg_test.zip"]) == 0
        shutil.copy(self.annotations / "psg_test.zip", self.annotations / "psg_dev.zip")
        self.dist = root / "dist"
        assert build.main(["--out", self.dist, "--annotations", self.annotations]) == 0
        self.compute = root / "compute"
        self.package, self.challenge_dir = import_as_worker(self.dist / "evaluation_script.zip", self.compute, 1)
        self.main = self.package.main
        with zipfile.ZipFile(self.dist / "challenge_config.zip") as archive:
            self.config = yaml.safe_load(archive.read("challenge_config.yaml"))
        self.submissions = 0

    def annotation_path(self, codename, source=None):
        """The phase's annotation file where the worker keeps it (the stored name is a uuid)."""
        folder = self.challenge_dir / "phase_data" / f"phase_{PHASE_IDS[codename]}"
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"5f0c1e7a-{codename}{'-other' if source else ''}.zip"
        shutil.copy(source or self.annotations / f"psg_{codename}.zip", path)
        return path

    def submit(self, prediction, codename="test", annotation=None):
        """evaluate() called as the worker calls it, on a copy of prediction stored as EvalAI
        stores uploads (submission_files/submission_<id>/<uuid><extension>)."""
        self.submissions += 1
        folder = self.compute / "submission_files" / f"submission_{self.submissions}"
        folder.mkdir(parents=True)
        user = folder / f"3b9d2c44-{self.submissions:04d}{prediction.suffix}"
        shutil.copy(prediction, user)
        metadata = {"id": self.submissions, "status": "running", "participant_team_name": "Test Team",
                    "input_file": f"https://example.org/media/{user.name}", "method_name": "test"}
        return self.package.evaluate(str(annotation or self.annotation_path(codename)), str(user), codename,
                                     submission_metadata=metadata), user

    def direct(self, prediction, codename="test"):
        """sgeval.evaluate on the original files with the phase's settings."""
        phase = self.main.PHASES[codename]
        return sgeval.evaluate(sgeval.make_config({
            "gt": str(self.gt), "gt_seg": str(self.data / "panoptic"), "pred": str(prediction),
            "protocol": phase.protocol, "protocols": list(phase.protocols), "k": list(phase.k),
            "metrics": list(phase.metrics), **phase.config}))


@pytest.fixture(scope="module")
def challenge(tmp_path_factory):
    try:
        yield Challenge(tmp_path_factory.mktemp("evalai"))
    finally:  # also when the import failed half-way
        for name in [name for name in sys.modules if name.split(".")[0] == "challenge_data"]:
            del sys.modules[name]


def linked_boards(config, codename):
    """{split codename: leaderboard schema} of a phase, through the config's challenge_phase_splits."""
    phase_id = next(phase["id"] for phase in config["challenge_phases"] if phase["codename"] == codename)
    splits = {split["id"]: split["codename"] for split in config["dataset_splits"]}
    boards = {board["id"]: board["schema"] for board in config["leaderboard"]}
    return {splits[link["dataset_split_id"]]: boards[link["leaderboard_id"]]
            for link in config["challenge_phase_splits"] if link["challenge_phase_id"] == phase_id}


def assert_worker_accepts(output, config, codename):
    """What the worker and the leaderboard need of evaluate()'s output: a `result` list whose
    entries each hold one split codename linked to the phase, every label of its leaderboard and
    nothing else, numbers only (the leaderboard sorts by float(result[default_order_by]))."""
    boards = linked_boards(config, codename)
    assert isinstance(output["result"], list) and output["result"]
    for entry in output["result"]:
        assert len(entry) == 1
        split, row = next(iter(entry.items()))
        assert split in boards, (split, boards)
        assert list(row) == boards[split]["labels"]
        assert all(type(value) in (int, float) for value in row.values()), row
        float(row[boards[split]["default_order_by"]])
    json.dumps(output)  # the worker stores result, submission_result and submission_metadata as JSON


def test_worker_call_gives_the_leaderboard_row_of_sgeval(challenge, capsys):
    output, _ = challenge.submit(challenge.pred)
    assert_worker_accepts(output, challenge.config, "test")
    assert challenge.main.sgeval.__file__ == str(challenge.challenge_dir / "sgeval.py")  # the bundled copy
    assert (challenge.challenge_dir / "sgeval.py").read_bytes() == (ROOT / "sgeval.py").read_bytes()

    direct, phase = challenge.direct(challenge.pred), challenge.main.PHASES["test"]
    metrics = {protocol: section["metrics"] for protocol, section in direct["by_protocol"].items()}
    expected = {f"{family}@{k} ({protocol})": round(100 * metrics[protocol][f"{family}@{k}"], 2)
                for protocol in ("singlempo", "unique", "openpsg", "multimpo") for family in ("R", "mR")
                for k in ("20", "50", "100")}
    audit = direct["protocol_audit"]["per_image_mean"]
    expected |= {"duplicate instances per image": round(audit["duplicate_instances"], 2),
                 "duplicate relations per image": round(audit["duplicate_relations_after_merge"], 2),
                 "images without prediction": direct["images"]["missing_predictions"]}
    assert output["result"] == [{phase.split: expected}] and phase.split == "test_split"
    assert output["submission_result"] == {"test_split": expected}
    assert expected["R@50 (singlempo)"] != expected["R@50 (openpsg)"]  # the protocols differ on the demo
    assert expected["images without prediction"] == 2
    assert "31 images evaluated, 2 without a prediction" in capsys.readouterr().out


def test_every_phase_of_the_config_is_accepted(challenge):
    for phase in challenge.config["challenge_phases"]:
        output, _ = challenge.submit(challenge.pred, phase["codename"])
        assert_worker_accepts(output, challenge.config, phase["codename"])


def test_missing_images_are_counted_not_an_error(challenge, tmp_path):
    prediction = tmp_path / "partial.zip"
    shutil.copy(challenge.pred, prediction)
    rewrite_json(prediction, lambda data: data.update(images=data["images"][3:]))
    output, _ = challenge.submit(prediction)
    row = output["result"][0]["test_split"]
    direct = challenge.direct(prediction)
    assert row["images without prediction"] == direct["images"]["missing_predictions"] == 5
    assert row["R@50 (singlempo)"] == round(100 * direct["by_protocol"]["singlempo"]["metrics"]["R@50"], 2)


def failure(challenge, prediction, annotation=None):
    """The text the worker writes to the participant's stderr file when evaluate() raises
    (traceback.format_exc()): no chained exception, no path of the annotations or the submission."""
    try:
        challenge.submit(prediction, annotation=annotation)
    except Exception:  # noqa: BLE001 -- the worker catches every exception the same way
        text = traceback.format_exc()
    else:
        raise AssertionError("the submission was accepted")
    assert "During handling of the above exception" not in text
    for hidden in ("sgeval-evalai-", "phase_data", "5f0c1e7a", "submission_files", str(challenge.data)):
        assert hidden not in text, (hidden, text)
    return text


def last_message(text):
    """The exception's message: what follows the last frame of the traceback."""
    return text[text.index("SubmissionError: ") + len("SubmissionError: "):]


def test_a_wrong_field_names_the_file_and_image_and_hides_the_paths(challenge, tmp_path):
    prediction = tmp_path / "bad.zip"
    shutil.copy(challenge.pred, prediction)
    image_id = []

    def break_one(data):
        record = data["images"][0]
        image_id.append(str(record["id"]))
        record["triplets"][0] = [0, 999, 1]

    rewrite_json(prediction, break_one)
    text = failure(challenge, prediction)
    message = last_message(text)
    user_name = f"3b9d2c44-{challenge.submissions:04d}.zip"
    assert message.startswith("the submission cannot be evaluated (sgeval ")
    problem = message.splitlines()[1]
    assert problem.startswith(f"{user_name}: image {image_id[0]}: ") and "triplet" in problem and "999" in problem
    assert str(challenge.compute) not in message and "/" not in problem.split(":")[0]


def test_broken_json_names_the_file(challenge, tmp_path):
    prediction = tmp_path / "broken.json"
    prediction.write_text('{"version": 1, "images": [{"id": "1000", ')
    message = last_message(failure(challenge, prediction))
    assert f"3b9d2c44-{challenge.submissions:04d}.json: " in message
    assert str(challenge.compute) not in message and "sgeval-evalai-" not in message


def test_a_problem_of_the_annotations_shows_no_path(challenge, tmp_path):
    with zipfile.ZipFile(challenge.annotations / "psg_test.zip") as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    png = min(name for name in members if name.startswith("panoptic/"))
    del members[png]
    annotation = challenge.annotation_path("test", write_zip(tmp_path / "ann.zip", members))
    message = last_message(failure(challenge, challenge.pred, annotation))
    image_id = png.split("/")[-1].removesuffix(".png")
    assert message.startswith("the evaluation failed (a problem of the test annotations")
    assert f"<test annotations>/{png}: image {image_id}: panoptic PNG not found" in message
    assert "sgeval-evalai-" not in message and str(annotation) not in message


@pytest.mark.parametrize("members, words", [
    ({"psg.json": b"{}", "../evil.txt": b"x"}, "unsafe path"),
    ({"psg.json": b"{}", "/etc/evil": b"x"}, "unsafe path"),
    ({"psg.json": b"{}", "panoptic/../../evil": b"x"}, "unsafe path"),
    ({"psg.json": b"{}", "notes.txt": b"x"}, "neither psg.json"),
    ({"panoptic/1.png": b"x"}, "no psg.json"),
])
def test_unsafe_annotation_zips_are_refused_before_extracting(challenge, tmp_path, members, words):
    archive = write_zip(tmp_path / "ann.zip", members)
    target = tmp_path / "out"
    with pytest.raises(challenge.main.AnnotationError, match=words):
        challenge.main.unpack_annotations(archive, target)
    assert not target.exists() and not (tmp_path / "evil.txt").exists()


def test_annotation_size_limit_is_checked_before_extracting(challenge, tmp_path, monkeypatch):
    monkeypatch.setattr(challenge.main, "MAX_ANNOTATION_BYTES", 1000)
    target = tmp_path / "out"
    with pytest.raises(challenge.main.AnnotationError, match="more than the limit of 1000"):
        challenge.main.unpack_annotations(challenge.annotations / "psg_test.zip", target)
    assert not target.exists()


def test_the_temporary_folder_is_removed_after_success_and_failure(challenge, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    challenge.submit(challenge.pred)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(challenge.main.SubmissionError):
        challenge.submit(broken)
    assert list((tmp_path / "tmp").iterdir()) == []


def test_unknown_phase_codename_names_the_known_ones(challenge):
    with pytest.raises(ValueError, match="'final' is not one of .*: dev, test"):
        challenge.submit(challenge.pred, "final", annotation=challenge.annotation_path("test"))


def test_challenge_config_labels_are_the_script_columns(challenge):
    config = yaml.safe_load((ROOT / "evalai" / "challenge_config.yaml").read_text())
    assert config == challenge.config
    assert [phase["codename"] for phase in config["challenge_phases"]] == list(challenge.main.PHASES)
    for codename, phase in challenge.main.PHASES.items():
        boards = linked_boards(config, codename)
        assert list(boards) == [phase.split]
        assert boards[phase.split]["labels"] == challenge.main.columns(codename)
        assert boards[phase.split]["default_order_by"] == challenge.main.order_by(codename) == "mR@50 (singlempo)"
    assert build.config_problems(config) == []


def test_config_problems_name_a_mismatch_with_the_script():
    config = yaml.safe_load((ROOT / "evalai" / "challenge_config.yaml").read_text())
    config["leaderboard"][0]["schema"]["labels"].remove("R@20 (unique)")
    config["dataset_splits"][1]["codename"] = "final_split"
    problems = build.config_problems(config)
    assert any("phase 'dev'" in p and "'R@20 (unique)'] missing" in p for p in problems), problems
    assert any("phase 'test'" in p and "'test_split'" in p for p in problems), problems


def test_challenge_config_zip_holds_one_yaml_and_every_file_it_names(challenge, tmp_path):
    with zipfile.ZipFile(challenge.dist / "challenge_config.zip") as archive:
        names = set(archive.namelist())
        assert [name for name in names if name.endswith((".yaml", ".yml"))] == ["challenge_config.yaml"]
        assert archive.read("evaluation_script.zip") == (challenge.dist / "evaluation_script.zip").read_bytes()
    config = challenge.config
    named = {config[field] for field in (*build.HTML_FIELDS, "image", "evaluation_script")}
    named |= {phase[key] for phase in config["challenge_phases"] for key in ("description", "test_annotation_file")}
    assert named | {"challenge_config.yaml"} == names
    assert build.main(["--out", tmp_path, "--annotations", challenge.annotations]) == 0  # the same bytes again
    for name in ("evaluation_script.zip", "challenge_config.zip"):
        assert (tmp_path / name).read_bytes() == (challenge.dist / name).read_bytes()


def test_bundle_pins_sgeval_dependencies(challenge):
    with zipfile.ZipFile(challenge.dist / "evaluation_script.zip") as archive:
        assert sorted(archive.namelist()) == ["__init__.py", "main.py", "requirements.txt", "sgeval.py"]
        pins = archive.read("requirements.txt").decode().split()
    assert [pin.split("==")[0] for pin in pins] == ["numba", "numpy", "tifffile", "imagecodecs", "pillow", "click",
                                                     "pyyaml", "msgspec"]
    assert set(pins) <= set((ROOT / "requirements.txt").read_text().split())


def test_annotations_zip_holds_psg_json_and_the_evaluated_images_pngs(challenge):
    data = json.loads(challenge.gt.read_text())
    test_ids = set(map(str, data["test_image_ids"]))
    evaluated = {f"panoptic/{entry['pan_seg_file_name']}" for entry in data["data"]
                 if entry["image_id"] in test_ids and entry["relations"]}
    with zipfile.ZipFile(challenge.annotations / "psg_test.zip") as archive:
        assert archive.read("psg.json") == challenge.gt.read_bytes()
        assert set(archive.namelist()) == {"psg.json", *evaluated}
    assert len(evaluated) == 31 < len(test_ids)  # a test image without relations needs no PNG


def test_remote_result_is_what_update_submission_accepts(challenge):
    output, _ = challenge.submit(challenge.pred, "dev")
    remote = challenge.main.remote_result(output["result"])
    labels = linked_boards(challenge.config, "dev")["dev_split"]["labels"]
    assert [entry["split"] for entry in remote] == ["dev_split"] and remote[0]["show_to_participant"] is True
    accuracies = remote[0]["accuracies"]
    assert set(accuracies) == set(labels) and all(type(value) in (int, float) for value in accuracies.values())



def test_a_phase_with_panoptic_quality_has_its_columns(challenge, monkeypatch):
    """A phase that names PQ keys turns pq on and shows them once, after the protocols' columns."""
    phase = challenge.main.Phase(split="test_split", protocols=("unique",), metrics=("mR",), k=("50",),
                                 order_by="PQ", pq=("PQ", "SQ", "RQ"), config={"pq_merge": "score-order"})
    monkeypatch.setitem(challenge.main.PHASES, "test", phase)
    assert challenge.main.columns("test") == ["mR@50 (singlempo)", "mR@50 (unique)", "PQ", "SQ", "RQ",
                                              *challenge.main.AUDIT_COLUMNS, challenge.main.MISSING_COLUMN]
    assert challenge.main.order_by("test") == "PQ"
    output, _ = challenge.submit(challenge.pred)
    direct = sgeval.evaluate(sgeval.make_config({"gt": str(challenge.gt), "gt_seg": str(challenge.data / "panoptic"),
                                                 "pred": str(challenge.pred), "pq": True, "pq_merge": "score-order",
                                                 "metrics": ["R"]}))
    row = output["result"][0]["test_split"]
    assert list(row) == challenge.main.columns("test")
    assert {key: row[key] for key in ("PQ", "SQ", "RQ")} == {key: round(100 * direct["metrics"][key], 2)
                                                            for key in ("PQ", "SQ", "RQ")}
