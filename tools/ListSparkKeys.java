import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.util.TreeMap;

public class ListSparkKeys {
    public static void main(String[] args) throws Exception {
        TreeMap<String, String> out = new TreeMap<>();
        for (String name : args) {
            Class<?> cls = Class.forName(name);
            Object module = cls.getField("MODULE$").get(null);
            for (Method m : cls.getDeclaredMethods()) {
                if (m.getParameterCount() != 0 || !Modifier.isPublic(m.getModifiers())) continue;
                Class<?> type = m.getReturnType();
                if (org.apache.spark.internal.config.ConfigEntry.class.isAssignableFrom(type)) {
                    Object e = m.invoke(module);
                    org.apache.spark.internal.config.ConfigEntry<?> entry =
                        (org.apache.spark.internal.config.ConfigEntry<?>) e;
                    out.put(entry.key(), "entry\t" + entry.defaultValueString());
                } else if (type == String.class) {
                    String value = (String) m.invoke(module);
                    if (value != null && value.startsWith("spark.") && value.endsWith(".")) {
                        out.put(value, "prefix\t");
                    }
                }
            }
        }
        for (var e : out.entrySet()) System.out.println(e.getKey() + "\t" + e.getValue());
    }
}
