// KordRegistry: Apicurio Registry's Java serdes (the Kafka serializers and
// deserializers a Java service would use) behind a line protocol, so that
// kord's tests can hand records to Java and back (serde/registry's
// TestJava*). Built and run by scripts/schema-registry.sh; not part of kord.
//
// One command per line on stdin, fields separated by tabs; one reply per
// line on stdout, "ok\t<result>" or "err\t<message>":
//
//   ser avro TOPIC SCHEMA JSON   the Avro record JSON (Avro's JSON encoding
//                                of SCHEMA) serialized with
//                                AvroKafkaSerializer, auto-registering
//                                SCHEMA under TOPIC-value; result: hex
//   ser json TOPIC - JSON        JSON serialized with
//                                JsonSchemaKafkaSerializer, the subject's
//                                latest schema found (not registered) and
//                                the value validated against it; result: hex
//   de avro TOPIC HEX            HEX deserialized with AvroKafkaDeserializer
//                                (the writer's schema fetched by its id);
//                                result: the record as Avro's JSON encoding
//   de json TOPIC HEX            HEX deserialized with
//                                JsonSchemaKafkaDeserializer, validated;
//                                result: the JSON text
//
// Both sides use the Confluent wire format: magic byte 0, then the 4-byte
// id. In Apicurio Registry 3 the id its Confluent API hands out is the
// content id, so the serdes are told to write and read content ids.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.apicurio.registry.serde.avro.AvroKafkaDeserializer;
import io.apicurio.registry.serde.avro.AvroKafkaSerializer;
import io.apicurio.registry.serde.jsonschema.JsonSchemaKafkaDeserializer;
import io.apicurio.registry.serde.jsonschema.JsonSchemaKafkaSerializer;
import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.io.JsonEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.kafka.common.header.internals.RecordHeaders;

public class KordRegistry {
    static String url;
    static final ObjectMapper mapper = new ObjectMapper();

    static Map<String, Object> config(boolean serializer, String format) {
        Map<String, Object> c = new HashMap<>();
        c.put("apicurio.registry.url", url);
        // Confluent's framing: magic 0 and a 4-byte content id (the serdes'
        // default in 3.x, spelled out; 2.x wrote an 8-byte global id).
        c.put("apicurio.registry.id-handler", "io.apicurio.registry.serde.Default4ByteIdHandler");
        c.put("apicurio.registry.use-id", "contentId");
        if (serializer) {
            if (format.equals("avro")) {
                c.put("apicurio.registry.auto-register", "true");
            } else {
                c.put("apicurio.registry.find-latest", "true");
            }
        }
        if (format.equals("json")) {
            c.put("apicurio.registry.serde.validation-enabled", "true");
        }
        return c;
    }

    static String run(String[] f) throws Exception {
        String op = f[0], format = f[1], topic = f[2];
        if (op.equals("ser") && format.equals("avro")) {
            Schema schema = new Schema.Parser().parse(f[3]);
            GenericRecord rec = new GenericDatumReader<GenericRecord>(schema)
                    .read(null, DecoderFactory.get().jsonDecoder(schema, f[4]));
            try (AvroKafkaSerializer<GenericRecord> s = new AvroKafkaSerializer<>()) {
                s.configure(config(true, format), false);
                return HexFormat.of().formatHex(s.serialize(topic, new RecordHeaders(), rec));
            }
        }
        if (op.equals("ser") && format.equals("json")) {
            JsonNode v = mapper.readTree(f[4]);
            try (JsonSchemaKafkaSerializer<JsonNode> s = new JsonSchemaKafkaSerializer<>()) {
                s.configure(config(true, format), false);
                return HexFormat.of().formatHex(s.serialize(topic, new RecordHeaders(), v));
            }
        }
        byte[] b = HexFormat.of().parseHex(f[3]);
        if (op.equals("de") && format.equals("avro")) {
            try (AvroKafkaDeserializer<GenericRecord> d = new AvroKafkaDeserializer<>()) {
                d.configure(config(false, format), false);
                GenericRecord rec = d.deserialize(topic, new RecordHeaders(), b);
                ByteArrayOutputStream out = new ByteArrayOutputStream();
                JsonEncoder enc = EncoderFactory.get().jsonEncoder(rec.getSchema(), out);
                new GenericDatumWriter<GenericRecord>(rec.getSchema()).write(rec, enc);
                enc.flush();
                return out.toString(StandardCharsets.UTF_8);
            }
        }
        if (op.equals("de") && format.equals("json")) {
            try (JsonSchemaKafkaDeserializer<Object> d = new JsonSchemaKafkaDeserializer<>()) {
                d.configure(config(false, format), false);
                return mapper.writeValueAsString(d.deserialize(topic, new RecordHeaders(), b));
            }
        }
        throw new IllegalArgumentException("unknown command " + op + " " + format);
    }

    public static void main(String[] args) throws Exception {
        url = args[0];
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        for (String line; (line = in.readLine()) != null; ) {
            String reply;
            try {
                reply = "ok\t" + run(line.split("\t", -1));
            } catch (Throwable t) {
                StringBuilder m = new StringBuilder();
                for (Throwable c = t; c != null; c = c.getCause()) {
                    m.append(m.length() > 0 ? ": " : "").append(c.getClass().getSimpleName()).append(" ").append(c.getMessage());
                }
                reply = "err\t" + m.toString().replace('\n', ' ').replace('\t', ' ');
            }
            out.println(reply);
        }
        System.exit(0); // the serdes' Vert.x threads would keep the JVM up
    }
}
