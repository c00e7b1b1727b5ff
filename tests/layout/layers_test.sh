#!/usr/bin/env bash
# The tree's dependency direction, checked on every #include "..." of the project's own
# sources: each folder may include only the folders listed for it below (and itself).
# A new folder must be added here, so that its place in the direction is decided, not
# found later. Prints every include that breaks the rule and exits 1; exits 0 when none.
#
#   base  <-  decoder, slot  <-  src/kafka, src/metrics  <-  src/relay/core
#   src/relay/core  <-  polling, lifecycle, recovery  <-  commands  <-  run  <-  src/cli
#   src/outbox: base, slot and the relay core's column defaults (header-only)
#   src/inbox:  base, slot, src/kafka
#   src/audit:  base only (an independent witness of the relay)  <-  src/cli
#
# Usage: layers_test.sh SOURCE_DIR
set -euo pipefail
root=${1:?usage: layers_test.sh SOURCE_DIR}
cd "$root"

declare -A allowed=(
  [base]="base"
  [decoder]="base decoder"
  [slot]="base slot"
  [src/kafka]="base src/kafka"
  [src/metrics]="base src/metrics"
  [src/relay/core]="base decoder slot src/kafka src/metrics src/relay/core"
  [src/relay/polling]="base decoder slot src/kafka src/metrics src/relay/core src/relay/polling"
  [src/relay/lifecycle]="base decoder slot src/kafka src/metrics src/relay/core src/relay/lifecycle"
  [src/relay/recovery]="base decoder slot src/kafka src/metrics src/relay/core src/relay/recovery"
  [src/relay/commands]="base decoder slot src/kafka src/metrics src/relay/core src/relay/recovery src/relay/commands"
  [src/relay/run]="base decoder slot src/kafka src/metrics src/relay/core src/relay/polling src/relay/lifecycle src/relay/recovery src/relay/run"
  [src/outbox]="base slot src/outbox src/relay/core"
  [src/inbox]="base slot src/kafka src/inbox"
  [src/audit]="base src/audit"
  [src/cli]="base decoder slot src/kafka src/metrics src/relay/core src/relay/polling src/relay/lifecycle src/relay/recovery src/relay/commands src/relay/run src/audit src/cli"
)

# The folder a project path belongs to: the longest key of `allowed` that prefixes it.
folder_of() {
  local path=$1 best="" k
  for k in "${!allowed[@]}"; do
    if [[ $path == "$k/"* && ${#k} -gt ${#best} ]]; then best=$k; fi
  done
  printf '%s' "$best"
}

bad=0
checked=0
while IFS= read -r file; do
  from=$(folder_of "$file")
  if [[ -z $from ]]; then
    echo "$file: in no folder this check knows; add its folder to tests/layout/layers_test.sh"
    bad=1
    continue
  fi
  while IFS= read -r inc; do
    [[ -z $inc ]] && continue
    checked=$((checked + 1))
    to=$(folder_of "$inc")
    [[ -z $to ]] && continue  # a generated or third-party header
    ok=0
    for a in ${allowed[$from]}; do [[ $a == "$to" ]] && ok=1; done
    if [[ $ok == 0 ]]; then
      echo "$file includes $inc: $from may not depend on $to"
      bad=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find base decoder slot src \( -name '*.h' -o -name '*.cc' \) | sort)

if [[ $checked -lt 100 ]]; then
  echo "only $checked includes found: is $root the source tree?"
  exit 1
fi
if [[ $bad != 0 ]]; then
  echo "the tree's dependency direction is broken (the table at the top of $0 says which folder may include which)"
  exit 1
fi
echo "layers: $checked includes checked, every one in the allowed direction"
