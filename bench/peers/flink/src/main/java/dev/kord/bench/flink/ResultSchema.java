package dev.kord.bench.flink;

import com.fasterxml.jackson.core.JsonEncoding;
import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import org.apache.flink.api.common.serialization.SerializationSchema;

/**
 * The output record's key and value. The key is the uuid's UTF-8 bytes,
 * so that Kafka's producer places results by user as the input was placed;
 * the value is {"uuid","seq","count","ts"}, ts written back as the input's
 * string (null when the input had none).
 */
final class ResultSchema {
    private ResultSchema() {}

    /** The record key: the uuid. */
    static final class Key implements SerializationSchema<Result> {
        private static final long serialVersionUID = 1L;

        @Override
        public byte[] serialize(Result r) {
            return r.uuid.getBytes(StandardCharsets.UTF_8);
        }
    }

    /** The record value: the result as JSON. */
    static final class Value implements SerializationSchema<Result> {
        private static final long serialVersionUID = 1L;

        private transient JsonFactory json;
        private transient ByteArrayOutputStream buf;

        @Override
        public byte[] serialize(Result r) {
            if (json == null) {
                json = new JsonFactory();
                buf = new ByteArrayOutputStream(192);
            }
            buf.reset();
            try (JsonGenerator g = json.createGenerator(buf, JsonEncoding.UTF8)) {
                g.writeStartObject();
                g.writeStringField("uuid", r.uuid);
                g.writeNumberField("seq", r.seq);
                g.writeNumberField("count", r.count);
                if (r.ts == null) {
                    g.writeNullField("ts");
                } else {
                    g.writeStringField("ts", r.ts);
                }
                g.writeEndObject();
            } catch (IOException e) {
                throw new UncheckedIOException(e); // a ByteArrayOutputStream does not fail
            }
            return buf.toByteArray();
        }
    }
}
