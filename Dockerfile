# lwl image. CPU by default; a CUDA base works by build argument, e.g.
#   docker build --build-arg BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime .
# (the service issue adds the API and worker entry points).
ARG BASE=python:3.11-slim
FROM ${BASE}
WORKDIR /app
ENV PIP_NO_CACHE_DIR=1 OPENBLAS_NUM_THREADS=1
COPY pyproject.toml README.md ./
COPY lwl ./lwl
COPY service ./service
COPY worker ./worker
COPY examples ./examples
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install "torch==2.13.0" --index-url ${TORCH_INDEX} || pip install "torch==2.13.0" \
 && pip install .
ENTRYPOINT ["lwl"]
CMD ["run", "examples/friedman1.json", "--out", "/data/demo"]
