# maven_jars.sh (sourced): the jars of a harness pom.xml (scripts/kafka/pom.xml,
# bench/debezium/pom.xml), resolved from Maven Central into one folder once.
#   maven_jars POM DIR WHAT   copies the runtime dependencies of POM into DIR unless DIR is
#                             complete already for this very POM (DIR/.complete holds the
#                             POM's checksum, so an edited POM is resolved anew); WHAT names
#                             them in messages. Maven keeps its own copy in ~/.m2. Exits
#                             through the caller's die() on failure.
maven_jars() {
  local pom=$1 dir=$2 what=$3 sum
  sum=$(sha256sum "$pom" | cut -d' ' -f1)
  [[ -f "$dir/.complete" && "$(cat "$dir/.complete")" == "$sum" ]] && return 0
  command -v mvn >/dev/null || die "mvn not found (scripts/install-deps.sh installs maven)"
  command -v java >/dev/null || die "java not found (scripts/install-deps.sh installs a JDK)"
  log "resolving $what from Maven Central into $dir (once)"
  local tmp="$dir.tmp.$$"
  rm -rf "$tmp"
  if ! mvn -B -q -f "$pom" dependency:copy-dependencies -DincludeScope=runtime \
      -DoutputDirectory="$tmp" >&2; then
    rm -rf "$tmp"
    die "could not resolve $what from Maven Central ($pom; is Maven Central reachable?)"
  fi
  rm -rf "$dir"
  mv "$tmp" "$dir"
  echo "$sum" >"$dir/.complete"
}
