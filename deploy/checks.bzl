"""deploy_check: an sh_test that runs one deploy/ check program through run_check.sh."""

def deploy_check(name, needs, script, args = [], data = [], size = "small"):
    """Runs `script ARGS` (paths relative to the workspace root) with run_check.sh.

    Args:
      name: the test's name (also its JUnit case name).
      needs: "python3", "promtool" or "venv" (see run_check.sh): what is missing is SKIPPED.
      script: the check program, a label in this package.
      args: its arguments.
      data: the files it reads.
      size: the test size.
    """
    native.sh_test(
        name = name,
        size = size,
        srcs = ["run_check.sh"],
        args = [name, needs, "deploy/" + script] + args,
        data = [script] + data,
    )
