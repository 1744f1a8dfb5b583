# One image for the API and the workers. CPU by default; CUDA by build argument:
#   docker build -t lwl:cpu .
#   docker build --build-arg TORCH_INDEX=https://download.pytorch.org/whl/cu126 -t lwl:cuda .
# PyTorch's CUDA wheels carry the CUDA runtime; the host needs the NVIDIA driver and the
# container toolkit (docker run --gpus all ...). Workers use CUDA when it is available.
# Where no image can be pulled, scripts/build-images.sh builds BASE from Debian packages
# (debootstrap + docker import) and fills docker/wheels and docker/certs from this machine.
ARG BASE=python:3.11-slim
FROM ${BASE}
ENV PIP_NO_CACHE_DIR=1 OPENBLAS_NUM_THREADS=1 PYTHONUNBUFFERED=1 PATH=/opt/lwl/bin:$PATH
WORKDIR /app
# extra CA certificates (a TLS-intercepting proxy on the build host) and local wheels (torch);
# both folders may be empty
COPY docker/certs/ /usr/local/share/ca-certificates/
COPY docker/wheels/ /tmp/wheels/
RUN (command -v update-ca-certificates >/dev/null && update-ca-certificates >/dev/null || true) \
 && python3 -m venv /opt/lwl
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt
ARG TORCH_INDEX=https://download.pytorch.org/whl/cpu
RUN pip install --find-links /tmp/wheels "torch==2.13.0" --extra-index-url "${TORCH_INDEX}"
COPY pyproject.toml README.md ./
COPY lwl ./lwl
COPY service ./service
COPY worker ./worker
COPY examples ./examples
RUN pip install ".[service]" && rm -rf /tmp/wheels \
 && useradd --create-home lwl && mkdir -p /data && chown lwl /data
USER lwl
VOLUME ["/data"]
EXPOSE 8000
ENTRYPOINT ["lwl"]
# embedded default inside the container; LWL_API_KEYS is required to listen beyond loopback
CMD ["serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
