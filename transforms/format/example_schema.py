"""tf.train.Example message classes without TensorFlow, for readers that must not need it.

protobuf parses and serializes; only the schema is declared here, field for field as in
TensorFlow's example.proto and feature.proto (wire compatible: same numbers and types).
It lives in a private descriptor pool under its own package name, so it never clashes with
TensorFlow's `tensorflow.Example` when both are loaded in one process (the `tfrecord`
package's copy registers `tensorflow.*` in the default pool, which TensorFlow then refuses).
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

_SCHEMA = """
name: "segprep/tf_example.proto"
package: "segprep.tf_example"
syntax: "proto3"
message_type {
  name: "BytesList"
  field { name: "value" number: 1 label: LABEL_REPEATED type: TYPE_BYTES }
}
message_type {
  name: "FloatList"
  field { name: "value" number: 1 label: LABEL_REPEATED type: TYPE_FLOAT }
}
message_type {
  name: "Int64List"
  field { name: "value" number: 1 label: LABEL_REPEATED type: TYPE_INT64 }
}
message_type {
  name: "Feature"
  field {
    name: "bytes_list" number: 1 label: LABEL_OPTIONAL type: TYPE_MESSAGE
    type_name: ".segprep.tf_example.BytesList" oneof_index: 0
  }
  field {
    name: "float_list" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE
    type_name: ".segprep.tf_example.FloatList" oneof_index: 0
  }
  field {
    name: "int64_list" number: 3 label: LABEL_OPTIONAL type: TYPE_MESSAGE
    type_name: ".segprep.tf_example.Int64List" oneof_index: 0
  }
  oneof_decl { name: "kind" }
}
message_type {
  name: "Features"
  field {
    name: "feature" number: 1 label: LABEL_REPEATED type: TYPE_MESSAGE
    type_name: ".segprep.tf_example.Features.FeatureEntry"
  }
  nested_type {
    name: "FeatureEntry"
    field { name: "key" number: 1 label: LABEL_OPTIONAL type: TYPE_STRING }
    field {
      name: "value" number: 2 label: LABEL_OPTIONAL type: TYPE_MESSAGE
      type_name: ".segprep.tf_example.Feature"
    }
    options { map_entry: true }
  }
}
message_type {
  name: "Example"
  field {
    name: "features" number: 1 label: LABEL_OPTIONAL type: TYPE_MESSAGE
    type_name: ".segprep.tf_example.Features"
  }
}
"""

_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(text_format.Parse(_SCHEMA, descriptor_pb2.FileDescriptorProto()))


def _message(name: str) -> type:
    descriptor = _POOL.FindMessageTypeByName(f"segprep.tf_example.{name}")
    return message_factory.GetMessageClass(descriptor)


Example = _message("Example")
Features = _message("Features")
Feature = _message("Feature")
BytesList = _message("BytesList")
Int64List = _message("Int64List")
