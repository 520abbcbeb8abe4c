# Sourced by gpu/ncu_user.sh: `run NAME [ARGS...]` runs `python3 -m pytest "${ARGS[@]}" ARGS...` (280 s at most) with
# its output in $W/NAME.log, and prints "NAME WALL_SECONDS EXIT_CODE".
run() {  # name, extra args...
  local name=$1; shift
  local t0=$(date +%s.%N)
  timeout 280 python3 -m pytest "${ARGS[@]}" "$@" > "$W/$name.log" 2>&1
  local rc=$?
  echo "$name $(python3 -c "import time; print(f'{time.time() - $t0:.1f}')") $rc"
}
