#!/usr/bin/env bash
# Apache Cassandra for the tests and the benchmark, from Maven Central, cached under .cache/cassandra/.
#
#   scripts/cassandra.sh fetch     resolve the server's jars once; prints the directory holding them
#
# Maven Central's proxy here serves the server jar (org.apache.cassandra:cassandra-all) and its
# dependencies but not the binary tarball, so we resolve the jars with mvn and the tests run
# org.apache.cassandra.service.CassandraDaemon with their own cassandra.yaml (tests/cassandra_node.py).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
version=${CASSANDRA_VERSION:-5.0.8}
home="$root/.cache/cassandra/$version"

fetch() {
    if [ ! -f "$home/lib/.complete" ]; then
        mkdir -p "$home"
        cat > "$home/pom.xml" <<POM
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>querator</groupId><artifactId>cassandra-test-node</artifactId><version>1</version>
  <dependencies>
    <dependency>
      <groupId>org.apache.cassandra</groupId><artifactId>cassandra-all</artifactId><version>$version</version>
    </dependency>
  </dependencies>
</project>
POM
        rm -rf "$home/lib"
        mvn -B -q -f "$home/pom.xml" org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
            -DincludeScope=runtime -DoutputDirectory="$home/lib" >&2
        touch "$home/lib/.complete"
    fi
    echo "$home/lib"
}

case "${1:-}" in
    fetch) fetch ;;
    *) echo "usage: $0 fetch" >&2; exit 2 ;;
esac
