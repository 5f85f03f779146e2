#include "proto/blossom/v1/stream_request.h"

#include "gtest/gtest.h"

namespace blossom::v1 {
namespace {

// The wire compatibility the conversion relies on: every field has the same number, name, type
// and oneof in both messages.
TEST(StreamRequestTest, MessagesAreFieldForFieldAlike) {
  const google::protobuf::Descriptor* unary = GenerateRequest::descriptor();
  const google::protobuf::Descriptor* stream = GenerateStreamRequest::descriptor();
  ASSERT_EQ(unary->field_count(), stream->field_count());
  for (int i = 0; i < unary->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* a = unary->field(i);
    const google::protobuf::FieldDescriptor* b = stream->FindFieldByNumber(a->number());
    ASSERT_NE(b, nullptr) << a->name();
    EXPECT_EQ(a->name(), b->name());
    EXPECT_EQ(a->type(), b->type()) << a->name();
    EXPECT_EQ(a->is_repeated(), b->is_repeated()) << a->name();
    EXPECT_EQ(a->has_presence(), b->has_presence()) << a->name();
    EXPECT_EQ(a->message_type(), b->message_type()) << a->name();  // both null for scalars
    EXPECT_EQ(a->containing_oneof() == nullptr, b->containing_oneof() == nullptr) << a->name();
    if (a->containing_oneof() != nullptr) {
      EXPECT_EQ(a->containing_oneof()->name(), b->containing_oneof()->name()) << a->name();
    }
  }
}

TEST(StreamRequestTest, ConversionIsLossless) {
  GenerateRequest request;
  request.set_text("Once");
  request.mutable_sampling()->set_temperature(0.0f);
  request.mutable_stopping()->set_max_new_tokens(7);
  request.mutable_stopping()->add_stop("\n");
  request.set_priority(-1);
  request.set_model("m");
  request.set_request_id("r");
  request.set_return_prompt_tokens(true);
  GenerateStreamRequest stream = ToStreamRequest(request);
  EXPECT_EQ(stream.text(), "Once");
  EXPECT_TRUE(stream.sampling().has_temperature());
  EXPECT_EQ(stream.stopping().max_new_tokens(), 7);
  EXPECT_EQ(stream.priority(), -1);
  EXPECT_EQ(FromStreamRequest(stream).SerializeAsString(), request.SerializeAsString());
}

}  // namespace
}  // namespace blossom::v1
