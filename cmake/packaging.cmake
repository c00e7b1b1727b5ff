# Debian packages (cpack -G DEB, from a configured build tree; scripts/package-check.sh
# builds, installs, checks and removes them in CI):
#   walrelay      the programs, the systemd unit (ExecStart /usr/bin/walrelay), the example
#                 configuration, the alert rules and dashboard, the docs, LICENSE and NOTICE;
#                 its postinst creates the `walrelay` system user, purge removes it.
#   walrelay-dev  the libraries a service links (walrelay::inbox, walrelay::outbox), their
#                 headers, the CMake package and the pkg-config files.
# Both are named walrelay[-dev]_<version>_<arch>.deb; the version is project(VERSION).
# Runtime dependencies come from dpkg-shlibdeps (the libraries the programs link).

set(WALRELAY_PACKAGE_PREFIX /usr)

# A package is built from a production tree only: a tree that builds the tests compiles
# the test failpoints in (WALRELAY_FAILPOINTS), environment switches that kill the process.
# cpack in such a tree stops with this message.
if(WALRELAY_FAILPOINTS)
  file(WRITE ${PROJECT_BINARY_DIR}/packaging/refuse.cmake "message(FATAL_ERROR \"This build \
tree compiles the test failpoints in (WALRELAY_FAILPOINTS=ON, the default with the tests): \
a package built from it could be killed through its environment. Build the package from a \
production tree: cmake -S ${PROJECT_SOURCE_DIR} -B build/pkg -G Ninja \
-DWALRELAY_BUILD_TESTS=OFF -DWALRELAY_BUILD_BENCH=OFF && cmake --build build/pkg && \
cd build/pkg && cpack (scripts/package-check.sh does).\")\n")
  set(CPACK_PRE_BUILD_SCRIPTS ${PROJECT_BINARY_DIR}/packaging/refuse.cmake)
endif()

# The unit as the package installs it: the same file as packaging/systemd, with the
# package's paths. Only in the package (EXCLUDE_FROM_ALL): `cmake --install` users copy
# packaging/systemd/walrelay.service, written for /usr/local.
file(READ ${PROJECT_SOURCE_DIR}/packaging/systemd/walrelay.service _walrelay_unit)
string(REPLACE "/usr/local/" "${WALRELAY_PACKAGE_PREFIX}/" _walrelay_unit "${_walrelay_unit}")
file(WRITE ${PROJECT_BINARY_DIR}/packaging/walrelay.service "${_walrelay_unit}")
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/packaging/systemd/walrelay.service)
install(FILES ${PROJECT_BINARY_DIR}/packaging/walrelay.service
  DESTINATION lib/systemd/system COMPONENT runtime EXCLUDE_FROM_ALL)

install(FILES LICENSE NOTICE CHANGELOG.md README.md DESTINATION ${CMAKE_INSTALL_DOCDIR}
  COMPONENT runtime)
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime
  FILES_MATCHING PATTERN "*.md")
install(FILES docker/walrelay.example.toml DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
  COMPONENT runtime)
install(FILES docker/alerts.yml DESTINATION ${CMAKE_INSTALL_DATADIR}/walrelay/prometheus
  COMPONENT runtime)
install(FILES docker/grafana/walrelay-dashboard.json
  DESTINATION ${CMAKE_INSTALL_DATADIR}/walrelay/grafana COMPONENT runtime)

set(CPACK_PACKAGE_NAME walrelay)
set(CPACK_PACKAGE_VENDOR "the walrelay authors")
set(CPACK_PACKAGE_CONTACT "walrelay maintainers <walrelay@localhost>")
# No CPACK_PACKAGE_DESCRIPTION_SUMMARY: CPackDeb would put it before each component's own
# first line (the Debian synopsis).
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_GENERATOR DEB)
# Stripped programs (the debug symbols stay in the build tree); static libraries keep theirs.
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGING_INSTALL_PREFIX ${WALRELAY_PACKAGE_PREFIX})
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION database)
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/walrelay/walrelay")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME walrelay)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_DEPENDS "passwd")
set(CPACK_DEBIAN_RUNTIME_DESCRIPTION
  "PostgreSQL transactional outbox to Kafka through logical replication
walrelay reads an outbox publication's logical replication slot in commit order, publishes
every outbox event to Kafka with an idempotent producer (acks=all) and confirms a WAL
position only after Kafka acknowledged every event before it.")
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/packaging/debian/postinst ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME walrelay-dev)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
# What find_package(walrelay) and the .pc files need to link the static libraries.
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libpq-dev, librdkafka-dev, libsimdjson-dev, libfmt-dev, libspdlog-dev, pkg-config")
set(CPACK_DEBIAN_DEV_DESCRIPTION
  "walrelay's outbox producer helper and inbox consumer library (development files)
Static libraries walrelay::outbox (append an event to the outbox inside a transaction) and
walrelay::inbox (dedup in the same transaction as the side effect, offsets after commit,
dead letters), their headers, a CMake package and pkg-config files.")
include(CPack)
