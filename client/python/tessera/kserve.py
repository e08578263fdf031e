"""A KServe v2 (Open Inference Protocol) client for the models the coordinator serves
(``Module.publish``), over the stubs generated from proto/inference/grpc_predict_v2.proto,
imported on first use. Their messages live in a descriptor pool of their own, so tritonclient
(which registers the same protocol's messages) works in the same process."""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from . import dtypes as _dt
from .errors import DataLoss, InvalidArgument, translate_errors
from .interop import as_buffer, wrap_output
from .session import Session, get_session

__all__ = ["InferenceClient"]

_BY_KSERVE = {d.kserve: d for d in _dt.all_dtypes}


class InferenceClient:
    """KServe v2 calls to the coordinator's inference endpoint (the session's channel)."""

    def __init__(self, session: Optional[Session] = None, timeout: Optional[float] = None) -> None:
        from .inference import grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc

        self.session = get_session(session)
        self.timeout = timeout or self.session.timeout
        self._pb = grpc_predict_v2_pb2
        self._stub = grpc_predict_v2_pb2_grpc.GRPCInferenceServiceStub(self.session.channel)

    def _call(self, method: str, request: Any) -> Any:
        with translate_errors():
            return getattr(self._stub, method)(request, timeout=self.timeout,
                                               metadata=self.session.transport.metadata)

    def server_live(self) -> bool:
        return self._call("ServerLive", self._pb.ServerLiveRequest()).live

    def server_ready(self) -> bool:
        return self._call("ServerReady", self._pb.ServerReadyRequest()).ready

    def model_ready(self, model: str, version: str = "") -> bool:
        return self._call("ModelReady", self._pb.ModelReadyRequest(name=model,
                                                                   version=version)).ready

    def model_metadata(self, model: str, version: str = "") -> Any:
        """Name, versions, platform, inputs and outputs (name, datatype, shape; -1 for the
        batch dim)."""
        return self._call("ModelMetadata", self._pb.ModelMetadataRequest(name=model,
                                                                         version=version))

    def infer(self, model: str, input: Any, *, version: str = "", input_name: str = "input",
              request_id: str = "", kind: str = "numpy") -> Any:
        """ModelInfer with one input (numpy array or CPU torch tensor, sent as raw bytes);
        the model's one output as a numpy array (or torch tensor)."""
        b = as_buffer(input)
        request = self._pb.ModelInferRequest(model_name=model, model_version=version,
                                             id=request_id)
        tensor = request.inputs.add()
        tensor.name = input_name
        tensor.datatype = b.dtype.kserve
        tensor.shape.extend(b.shape)
        request.raw_input_contents.append(b.tobytes())
        reply = self._call("ModelInfer", request)
        if len(reply.outputs) != 1 or len(reply.raw_output_contents) != 1:
            raise DataLoss(f"model '{model}' answered {len(reply.outputs)} outputs; one expected")
        out = reply.outputs[0]
        dtype = _BY_KSERVE.get(out.datatype)
        if dtype is None:
            raise InvalidArgument(f"model '{model}' answered datatype {out.datatype}")
        array = np.frombuffer(reply.raw_output_contents[0], dtype=dtype.storage)
        return wrap_output(array.reshape(tuple(out.shape)).copy(), dtype, kind)

