# Sourced by scripts/*: makes sure .venv exists and holds the project with the given extras.
# Usage: ensure_venv test,bench   (reinstalls only when pyproject.toml or the extras change)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
PY="$VENV/bin/python"

ensure_venv() {
  local extras="$1"
  if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip >/dev/null
  fi
  local want stamp="$VENV/.corral-installed"
  want="$(sha256sum "$ROOT/pyproject.toml" | cut -c1-16) $extras"
  # A stamp holding the same pyproject hash and a superset of the extras means nothing to do.
  if [ -f "$stamp" ]; then
    local have; have="$(cat "$stamp")"
    local ok=1 e
    [ "${have%% *}" = "${want%% *}" ] || ok=0
    for e in ${extras//,/ }; do
      case ",${have#* }," in *",$e,"*) ;; *) ok=0 ;; esac
    done
    [ $ok = 1 ] && return 0
    extras="$(printf '%s,%s' "${have#* }" "$extras" | tr ',' '\n' | sort -u | paste -sd, -)"
    want="${want%% *} $extras"
  fi
  "$PY" -m pip install -q -e "$ROOT[$extras]"
  echo "$want" > "$stamp"
}
