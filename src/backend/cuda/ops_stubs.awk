# Writes the no-CUDA build's stub of every op cuda_ops.h declares on one
# line as "int mm_cuda_NAME(mm_ctx *ctx, ...);": each records in the
# context that this build has no CUDA backend. Usage:
#   awk -f ops_stubs.awk cuda_ops.h > cuda_ops_stubs.c
BEGIN {
    print "/* Generated from src/backend/cuda/cuda_ops.h by ops_stubs.awk: do not edit. */"
    print "#include \"backend/cuda/cuda_ops.h\""
    print ""
    print "#define NO_CUDA(ctx) mm_ctx_fail((ctx), \"this mmh3 was built without CUDA (configure --with-cuda)\")"
}
/^int mm_cuda_[a-z0-9_]+\(mm_ctx \*ctx, .*\);$/ {
    sig = substr($0, 1, length($0) - 1)
    params = sig
    sub(/^[^(]*\(mm_ctx \*ctx, /, "", params)
    sub(/\)$/, "", params)
    n = split(params, p, /, /)
    print ""
    print sig
    print "{"
    for (i = 1; i <= n; i++) {
        name = p[i]
        if (match(name, /\(\*[A-Za-z_][A-Za-z0-9_]*\)/))
            name = substr(name, RSTART + 2, RLENGTH - 3)
        else
            sub(/^.*[ *]/, "", name)
        print "    (void)" name ";"
    }
    print "    return NO_CUDA(ctx);"
    print "}"
    count++
}
END {
    if (count == 0) {
        print "cuda_ops.h: no op declarations found" > "/dev/stderr"
        exit 1
    }
}
