"""Core errors name settings; the command line words them as flags, a library user as names."""

from __future__ import annotations

import pytest

from beam_pipeline.cli import main
from transforms.codecs.class_mask import class_mask_settings
from transforms.settings_error import SettingError
from transforms.splits import SplitFractions


def test_the_core_speaks_of_settings_not_flags():
    with pytest.raises(SettingError) as caught:
        class_mask_settings("classes", num_classes=4, ignore_index=2)
    assert "--" not in str(caught.value)
    assert str(caught.value).startswith("ignore_index 2 is a class id")
    assert caught.value.settings == ("ignore_index",)
    with pytest.raises(SettingError) as caught:
        SplitFractions(0.8, 0.5)
    assert str(caught.value).startswith("train_size + validation_size must be at most 1")


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--train_size", "0.8", "--validation_size", "0.5"], "--train_size + --validation_size"),
        (
            ["--mask_type", "classes", "--num_classes", "4", "--ignore_index", "2"],
            "--ignore_index 2 is a class id (num_classes 4): pass --ignore_index 255",
        ),
        (["--mask_type", "classes", "--num_classes", "1"], "--num_classes must be an integer"),
    ],
)
def test_the_command_line_words_them_as_flags(tmp_path, capsys, flags, line):
    (tmp_path / "images").mkdir()
    (tmp_path / "masks").mkdir()
    argv = [
        "prepare",
        "--image_dir",
        str(tmp_path / "images"),
        "--mask_dir",
        str(tmp_path / "masks"),
        "--output_dir",
        str(tmp_path / "out"),
        *flags,
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and line in err, err
