import subprocess
import sys

from click.testing import CliRunner

from kernelopt.cli import COMMANDS, main


def test_help_lists_every_command_without_importing_torch():
    code = "import sys; from kernelopt.cli import main\n" \
           "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n" \
           "print('torch' in sys.modules, 'triton' in sys.modules, 'sentence_transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    for name in COMMANDS:
        assert name in out
    assert out.strip().splitlines()[-1] == "False False False"


def test_unknown_command_is_usage_error():
    result = CliRunner().invoke(main, ["no-such-command"])
    assert result.exit_code == 2


def test_every_registered_command_imports():
    for name in COMMANDS:
        cmd = main.get_command(None, name)  # type: ignore[arg-type]
        assert cmd is not None and cmd.name == name
