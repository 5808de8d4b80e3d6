"""A script that starts a helper in a process group of its own (setpgid, as job-control shells and some launchers
do; still in the script's session), then ends: the helper must not outlive the run (raytf issue 71)."""

import subprocess
import sys

subprocess.Popen([sys.executable, "-c", "import threading; threading.Event().wait()", "raytf-test-helper"],
                 process_group=0)
print("started a helper in its own process group", flush=True)
