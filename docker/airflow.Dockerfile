# Airflow 3.3.2 image with the EHR-RobustGym package (pipeline/) installed, for docker-compose.yml.
# Build context is the repository root:  docker compose build   (or)
#   docker build -f docker/airflow.Dockerfile -t ehr-robustgym-airflow:3.3.2 .
#
# The project's own pins (pyproject.toml: duckdb 2.0.1, polars 2.1.0, pyarrow 26.0.1,
# great-expectations 1.24.1, pandas 3.1.1, numpy 2.4.6, pydantic 2.14.4, ...) resolve together with
# apache-airflow[celery]==3.3.2 as they are (checked with pip's resolver in a clean Python 3.11 venv),
# so they are installed unchanged. apache-airflow is named again on the same pip command line so that
# pip keeps the image's Airflow version instead of upgrading or downgrading it.
# celery is held below 5.7: celery 5.7.0 dropped celery.backends.database.retry, which
# apache-airflow-providers-celery 3.26.0 imports, so the CeleryExecutor and workers fail to import with it.
ARG AIRFLOW_VERSION=3.3.2
FROM apache/airflow:${AIRFLOW_VERSION}-python3.11

ARG AIRFLOW_VERSION=3.3.2
ENV EHRGYM_HOME=/opt/ehrgym \
    GX_ANALYTICS_ENABLED=false

# Only what the package build needs: the DAGs, templates and expectations are bind-mounted by compose
# (and copied here too, so the image also works without the mounts).
COPY --chown=airflow:root pyproject.toml README.md /opt/ehrgym/
COPY --chown=airflow:root pipeline /opt/ehrgym/pipeline
COPY --chown=airflow:root templates /opt/ehrgym/templates
COPY --chown=airflow:root expectations /opt/ehrgym/expectations

USER root
# The named volume ehrgym-data is mounted here; a fresh named volume takes this directory's owner.
RUN mkdir -p /opt/ehrgym/data && chown -R airflow:root /opt/ehrgym
USER airflow

# Editable (-e): the package finds its templates/ and expectations/ beside pipeline/ (paths relative to its own
# files), i.e. in /opt/ehrgym where compose mounts them; a regular install would look for them in site-packages.
RUN pip install --no-cache-dir "apache-airflow[celery]==${AIRFLOW_VERSION}" "celery[redis]>=5.5,<5.7" -e /opt/ehrgym

WORKDIR /opt/airflow
