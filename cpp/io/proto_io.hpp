// SPDX-License-Identifier: Apache-2.0
// Reading and writing protobuf messages as text (prototxt) and binary files.
//
// Text parse errors name file:line:column and the parser's complaint. Binary reads reject
// missing, truncated and corrupt files with an error naming the file. Every write goes to a
// temporary name in the same directory and is renamed into place, so a crash never leaves a
// half-written file under the final name.
#pragma once

#include <google/protobuf/message.h>

#include <string>

#include "proto/caffe.pb.h"

namespace cortado::io {

void ReadProtoFromTextFile(const std::string& path, google::protobuf::Message* message);
// `source` names the text in error messages (a file name, or "<string>").
void ReadProtoFromTextString(const std::string& text, const std::string& source,
                             google::protobuf::Message* message);
void ReadProtoFromBinaryFile(const std::string& path, google::protobuf::Message* message);
void WriteProtoToTextFile(const google::protobuf::Message& message, const std::string& path);
void WriteProtoToBinaryFile(const google::protobuf::Message& message, const std::string& path);

// Reads a whole file; throws kNotFound / kIo naming the file.
std::string ReadFile(const std::string& path);
// Writes `bytes` to `path` through a temporary file and rename; throws kIo naming the file.
void WriteFileAtomic(const std::string& path, const std::string& bytes);

// A net prototxt (text) or a .caffemodel (binary), upgraded from old formats as Caffe does.
caffe::NetParameter ReadNetParameterFromTextFile(const std::string& path);
// kInvalidArgument "<source>: the net defines no layers" for a net without layers (an empty
// prototxt parses as one). ReadNetParameterFromTextFile checks it.
void CheckNetHasLayers(const caffe::NetParameter& param, const std::string& source);
caffe::NetParameter ReadNetParameterFromBinaryFile(const std::string& path);
// A solver prototxt, upgraded (solver_type enum to type string) as Caffe does.
caffe::SolverParameter ReadSolverParameterFromTextFile(const std::string& path);

}  // namespace cortado::io
