from kernelopt.resources import data_dir
from kernelopt.yamlio import load_yaml
from kernelopt.errors import BadInput
import pytest


def test_data_dirs_exist():
    for folder in ("strategies", "knowledge", "templates"):
        assert data_dir(folder).is_dir()


def test_load_yaml_reports_line_of_keys(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text("pack:\n  name: x\nstrategies:\n  - id: a\n    title: b\n")
    doc = load_yaml(p)
    assert doc.data["strategies"][0]["title"] == "b"
    assert doc.line_of(("strategies", 0, "title")) == 5
    assert doc.where(("strategies", 0, "nope")).endswith(":4")


def test_load_yaml_malformed_names_file_and_line(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("a: [1, 2\nb: 3\n")
    with pytest.raises(BadInput) as err:
        load_yaml(p)
    assert str(p) in str(err.value) and "malformed YAML" in str(err.value)


def test_load_yaml_refuses_python_tags(tmp_path):
    p = tmp_path / "evil.yaml"
    p.write_text("x: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(BadInput):
        load_yaml(p)
