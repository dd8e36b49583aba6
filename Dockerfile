# The hooks server image: the `hooks` package and its runtime requirements, nothing else
# (no tests, no dev tools, no MXNet). Runs as uid 10001 on a read-only root filesystem;
# the Deployment mounts an emptyDir at /tmp.
FROM python:3.11.13-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONPATH=/app \
    PROMETHEUS_MULTIPROC_DIR=/tmp/prometheus

WORKDIR /app

# Requirements first, so a code change does not reinstall them. constraints.txt pins every
# indirect dependency too (the same versions the tests ran with), so a rebuild installs the same image.
COPY requirements.txt constraints.txt ./
RUN pip install --no-cache-dir -c constraints.txt -r requirements.txt

COPY hooks/ hooks/
# Bytecode compiled now, since the running container cannot write it.
RUN python -m compileall -q hooks \
    && groupadd --system --gid 10001 mxjob \
    && useradd --system --uid 10001 --gid 10001 --no-create-home \
        --home-dir /nonexistent --shell /usr/sbin/nologin mxjob

# Numeric, so the kubelet can check runAsNonRoot without reading /etc/passwd.
USER 10001:10001

EXPOSE 8080
CMD ["gunicorn", "--config", "python:hooks.server.gunicorn_conf", "hooks.server.app:create_app()"]
