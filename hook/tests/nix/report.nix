# Shell fragments the probe derivations share (probe.nix, concurrent.nix): each prints lines
# the tests read. `manifest`: the hook's manifest inside, on one line, or "manifest absent".
# `readPaths`: "read P" or "unreadable P" for every path in $READ_PATHS.
{
  manifest = ''
    if [ -f /run/cuda-sandbox/manifest.json ]; then
      echo "manifest $(tr -d ' \n' < /run/cuda-sandbox/manifest.json | head -c 2000)"
    else
      echo "manifest absent"
    fi
  '';
  readPaths = ''
    for f in $READ_PATHS; do
      if [ -d "$f" ] && ls "$f" >/dev/null 2>&1; then echo "read $f"
      elif [ -f "$f" ] && head -c 1 "$f" >/dev/null 2>&1; then echo "read $f"
      else echo "unreadable $f"; fi
    done
  '';
}
